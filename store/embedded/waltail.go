package embedded

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pebble replays its newest write-ahead log up to the first entry it
// cannot read and takes that entry for a write a crash cut short: within
// the log's last 32 KiB block it drops it, and every entry after it,
// quietly. A crash only loses what was not synced yet, so a sound entry
// after the unreadable one that says the log was synced past it (Pebble's
// chunks carry that offset) means the log is damaged: checkLogTail finds
// that case and Open refuses it, naming the log. (Unsynced pages may
// reach the disk out of order before a power cut, so a sound entry that
// does not say so is the unsynced end of the log.)
//
// An unreadable last entry is the one case a single log cannot tell from a
// write cut short: a damaged byte there, in a write that was synced and
// acknowledged, reads the same as a write the crash interrupted. Pebble
// drops it; checkLogTail says so (Open logs it as a warning, `store check`
// reports it), naming the log and the offset, so that the one operation
// that may run again, or answer 409, is not a mystery. What follows the
// last sound entry of a log that ended cleanly is zeros (preallocated
// space) or an older log's entries (a recycled log file), which name
// another log: neither is reported.

// The chunk format of Pebble's logs (pebble/record): a header of a
// checksum (4 bytes), the payload's length (2), the chunk's type (1), the
// log's number (4, in the recyclable and WAL-sync formats) and a synced
// offset (8, in the WAL-sync format), then the payload, in blocks of 32
// KiB. The checksum is a masked CRC-32C of everything after itself.
const (
	walBlock          = 32 << 10
	walLegacyHeader   = 7
	walRecycledHeader = 11
	walSyncHeader     = 19
)

// walHeaderSize is the header size of a chunk type, 0 for types that
// name no log (and so cannot be told from an older log's leftovers).
func walHeaderSize(typ byte) int {
	switch {
	case typ >= 5 && typ <= 8:
		return walRecycledHeader
	case typ >= 9 && typ <= 12:
		return walSyncHeader
	}
	return 0
}

// walChunkAt reports whether b[off:] starts a sound chunk of log logNum
// (or the end-of-log trailer, which names logNum+1), and its length.
func walChunkAt(b []byte, off int, logNum uint32) (int, bool) {
	if !walOwnHeader(b, off, logNum) {
		return 0, false
	}
	return chunkAt(b, off, walHeaderSize(b[off+6]))
}

// walOwnHeader reports whether b[off:] starts a chunk header that names
// log logNum (or its trailer), whatever its checksum says.
func walOwnHeader(b []byte, off int, logNum uint32) bool {
	if off+walRecycledHeader > len(b) || walHeaderSize(b[off+6]) == 0 {
		return false
	}
	n := binary.LittleEndian.Uint32(b[off+7:])
	return n == logNum || n == logNum+1
}

// chunkAt reports whether b[off:] starts a sound chunk whose header is hs
// bytes (its checksum matches, and it lies within its block and the
// file), and its length. Pebble's logs and manifests share the format.
func chunkAt(b []byte, off, hs int) (int, bool) {
	if hs == 0 || off+hs > len(b) || off/walBlock != (off+hs-1)/walBlock {
		return 0, false
	}
	end := off + hs + int(binary.LittleEndian.Uint16(b[off+4:]))
	if end > len(b) || (off/walBlock != (end-1)/walBlock && end > off+hs) {
		return 0, false
	}
	c := crc32.Checksum(b[off+6:end], crcTable)
	if binary.LittleEndian.Uint32(b[off:]) != (c>>15|c<<17)+0xa282ead8 {
		return 0, false
	}
	return end - off, true
}

// checkLogTail reads the newest log in DIR/db. It returns an error naming
// the log when an unreadable chunk is followed by a sound one of the same
// log; when only the log's last entry is unreadable (cut short or
// damaged: a header of this log whose chunk does not check out), it
// returns what Pebble drops, naming the log and the offset; nothing when
// the log reads to its end.
func checkLogTail(dir string) (dropped string, err error) {
	logs, _ := filepath.Glob(filepath.Join(dir, dbDir, "*.log"))
	if len(logs) == 0 {
		return "", nil
	}
	path := logs[len(logs)-1] // numbered, zero-padded: the newest sorts last
	num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	if err != nil {
		return "", nil
	}
	logNum := uint32(num)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("store: embedded store: %w", err)
	}
	off := 0
	for off < len(b) {
		rest := walBlock - off%walBlock
		if rest < walSyncHeader && allZero(b[off:min(off+rest, len(b))]) {
			off += rest // a block's zeroed end
			continue
		}
		n, ok := walChunkAt(b, off, logNum)
		if !ok {
			break
		}
		if binary.LittleEndian.Uint32(b[off+7:]) == logNum+1 {
			return "", nil // the end-of-log trailer
		}
		off += n
	}
	if off >= len(b) {
		return "", nil
	}
	for next := off + 1; next+walRecycledHeader <= len(b); next++ {
		if n, ok := walChunkAt(b, next, logNum); ok && n > walSyncHeader && claimsSynced(b, next, off) {
			return "", fmt.Errorf("store: embedded store %s is damaged (%s): the entry at offset %d cannot be read and a sound one "+
				"follows at offset %d, so it is not a write a crash cut short; acknowledged records would be lost: "+
				"restore DIR from a backup (`idemgate store check %s` says more)", dir, path, off, next, dir)
		}
	}
	shortHeader := off+walRecycledHeader > len(b) && !allZero(b[off:])
	if !shortHeader && (!walOwnHeader(b, off, logNum) || binary.LittleEndian.Uint32(b[off+7:]) != logNum) {
		return "", nil // zeros, the end-of-log trailer or an older log's entries: a clean end
	}
	return droppedLast(path, "entry of the newest write-ahead log", off), nil
}

// droppedLast says that the last entry of a log (the newest write-ahead
// log, or the manifest) cannot be read and is dropped, and what that means.
func droppedLast(path, what string, off int) string {
	return fmt.Sprintf("%s: the last %s, at offset %d, cannot be read (cut short or damaged) and is dropped: "+
		"it was the last write before a crash, which a crash that cut it short and a damaged byte leave alike. "+
		"If that write was acknowledged, the one operation it recorded may execute again (a dropped claim) "+
		"or be answered 409 as of unknown outcome (a dropped completion)", path, what, off)
}

// claimsSynced reports whether the sound chunk at next says that the log
// was synced past off when it was written (WAL-sync chunks carry that
// offset; older formats do not, and count as saying so). A chunk that
// does not was written after off, which a crash may have left unwritten
// on disk while later pages made it: the unsynced end of the log, where
// Pebble's replay stops, not damage.
func claimsSynced(b []byte, next, off int) bool {
	if walHeaderSize(b[next+6]) != walSyncHeader {
		return true
	}
	return binary.LittleEndian.Uint64(b[next+11:]) > uint64(off)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
