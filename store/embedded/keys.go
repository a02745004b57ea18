package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/idemgate/idemgate/store"
)

// dbDir is the Pebble database's directory inside DIR.
const dbDir = "db"

// Key layout. Every key starts with one byte naming its kind:
//
//	r<id>                      the record and the tombstone it carries, or its tombstone alone once it expired (codec.go, retention.go)
//	i<state><id>               state index: state is the state's position in store.IndexStates, as a byte (not of a completed record: see indexed)
//	x<expiry: 8 bytes BE ms><id> expiry index, soonest first (of a record not in flight, or of a tombstone alone: see expiring)
//	a<id>                      a replay's attempt count (varint), newer than the record's
//	m<name>                    the engine's own facts (the clean marker)
//	w<digest>                  a twin entry (retention.go)
const (
	kindAttempts byte = 'a'
	kindRecord   byte = 'r'
	kindIndex    byte = 'i'
	kindExpiry   byte = 'x'
	kindMeta     byte = 'm'
)

func recordKey(id string) []byte { return append([]byte{kindRecord}, id...) }

func attemptsKey(id string) []byte { return append([]byte{kindAttempts}, id...) }

// stateIdx is st's position in store.IndexStates: the state byte of
// its index key (and the order List walks the states in).
func stateIdx(st store.State) int {
	return slices.Index(store.IndexStates(), st)
}

func indexKey(state int, id string) []byte {
	return appendIndexKey(make([]byte, 0, 2+len(id)), state, id)
}

func expiryKey(at int64, id string) []byte {
	return appendExpiryKey(make([]byte, 0, 9+len(id)), at, id)
}

// appendIndexKey and appendExpiryKey append indexKey and expiryKey to b.
func appendIndexKey(b []byte, state int, id string) []byte {
	return append(append(b, kindIndex, byte(state)), id...)
}

func appendExpiryKey(b []byte, at int64, id string) []byte {
	return append(binary.BigEndian.AppendUint64(append(b, kindExpiry), uint64(max(at, 0))), id...)
}

// parseExpiryKey splits an expiry key.
func parseExpiryKey(k []byte) (at int64, id string, ok bool) {
	if len(k) < 10 || k[0] != kindExpiry {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), string(k[9:]), true
}

// slot is what a record key holds: the record as stored, expired or not
// (nil: none, or only a tombstone), and the tombstone it leaves or
// carries (until 0: none), live or not; and whether a replay's attempt
// count key is beside it (a write of the record then deletes it).
type slot struct {
	rec      *rec
	tomb     tomb
	attempts bool
}

// read reads record id as stored, expired or not; nil when there is none
// (or only its tombstone).
func (e *Engine) read(id string) (*rec, error) {
	s, err := e.readSlot(id)
	return s.rec, err
}

// readSlot reads record id's key, and a record's attempt count key.
//
// A key the key filter knows DIR does not hold is not read (known.go).
// A key this process wrote recently is read with Get, which the
// memtable answers alone; any other key with prefix seeks of one
// iterator that consults the bloom filters of every level: Pebble's Get
// skips the filters of the last level (where most records live), so the
// claim of a new key would read a data block of that level, from the
// block cache or from the disk (recent.go).
func (e *Engine) readSlot(id string) (slot, error) {
	if !e.known.may(id) {
		return slot{}, nil // a key DIR does not hold (known.go)
	}
	if e.recent.has(id) {
		return e.getSlot(id)
	}
	return e.seekSlot(id)
}

// seekSlot is readSlot with prefix seeks.
func (e *Engine) seekSlot(id string) (slot, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return slot{}, e.readErr(err)
	}
	defer it.Close()
	v, ok, err := seekKey(it, recordKey(id))
	switch {
	case err != nil:
		return slot{}, e.readErr(err)
	case !ok:
		return slot{}, nil
	}
	r, t, err := decodeValue(v)
	if err != nil {
		return slot{}, fmt.Errorf("embedded store %s: record %s does not decode: %w", e.dir, id, err)
	}
	if r == nil {
		return slot{tomb: t}, nil
	}
	a, ok, err := seekKey(it, attemptsKey(id))
	switch {
	case err != nil:
		return slot{}, e.readErr(err)
	case ok:
		n, k := binary.Varint(a)
		if k <= 0 {
			return slot{}, fmt.Errorf("embedded store %s: the attempt count of %s does not decode", e.dir, id)
		}
		r.Attempts = n
		return slot{rec: r, tomb: t, attempts: true}, nil
	}
	return slot{rec: r, tomb: t}, nil
}

// getSlot is readSlot with Get.
func (e *Engine) getSlot(id string) (slot, error) {
	v, c, err := e.db.Get(recordKey(id))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return slot{}, nil
	case err != nil:
		return slot{}, e.readErr(err)
	}
	r, t, err := decodeValue(v) // copies what it keeps
	_ = c.Close()
	switch {
	case err != nil:
		return slot{}, fmt.Errorf("embedded store %s: record %s does not decode: %w", e.dir, id, err)
	case r == nil:
		return slot{tomb: t}, nil
	}
	counted, err := e.getAttempts(r)
	if err != nil {
		return slot{}, err
	}
	return slot{rec: r, tomb: t, attempts: counted}, nil
}

// getAttempts reads record r's attempt count key with Get into r, and
// reports whether there is one.
func (e *Engine) getAttempts(r *rec) (bool, error) {
	a, c, err := e.db.Get(attemptsKey(r.ID))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return false, nil
	case err != nil:
		return false, e.readErr(err)
	}
	n, k := binary.Varint(a)
	_ = c.Close()
	if k <= 0 {
		return false, fmt.Errorf("embedded store %s: the attempt count of %s does not decode", e.dir, r.ID)
	}
	r.Attempts = n
	return true, nil
}

// seekKey reads key's value with it (valid until its next move); ok is
// false when there is no such key.
func seekKey(it *pebble.Iterator, key []byte) (v []byte, ok bool, err error) {
	if !it.SeekPrefixGE(key) {
		return nil, false, it.Error()
	}
	if !bytes.Equal(it.Key(), key) {
		return nil, false, nil // cannot be: the prefix is the whole key
	}
	v, err = it.ValueAndErr()
	return v, err == nil, err
}

// slotOf is readSlot for a caller holding id's lock: a record this
// process claimed and that is still in flight comes from memory (hot.go).
func (e *Engine) slotOf(id string) (slot, error) {
	if s, ok := e.hot.get(id); ok {
		return s, nil
	}
	return e.readSlot(id)
}

// putAttempts writes a replay's attempt count alone: a few bytes instead
// of the whole record with its stored answer.
func putAttempts(b *pebble.Batch, r *rec) error {
	return b.Set(attemptsKey(r.ID), binary.AppendVarint(nil, r.Attempts), nil)
}

// readErr names DIR in a failed read (a damaged table names itself).
func (e *Engine) readErr(err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("embedded store %s is damaged (%s): %w; run `idemgate store check %s`",
			e.dir, strings.Join(damagedFiles(e.dir, err), ", "), err, e.dir)
	}
	return fmt.Errorf("embedded store %s: %w", e.dir, err)
}

// putRecord writes next, carrying tombstone t, in place of old (nil:
// none) with its index keys, and deletes a replay's attempt count (the
// record carries the count again).
func putRecord(b *pebble.Batch, old, next *rec, t tomb) error {
	return writeRecord(b, old, next, t, true)
}

// writeRecord is putRecord for a caller that knows whether an attempt
// count key is there to delete (attempts). Keys and the value are encoded
// into a reused buffer: the batch copies them. An index key old and next
// share stays as it is.
func writeRecord(b *pebble.Batch, old, next *rec, t tomb, attempts bool) error {
	bp := scratch.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxScratch {
			scratch.Put(bp)
		}
	}()
	if old != nil {
		buf, err := unindexWith(b, old, next, (*bp)[:0])
		*bp = buf
		if err != nil {
			return err
		}
	}
	v := appendRecord((*bp)[:0], next, t)
	n := len(v)
	buf := append(append(v, kindRecord), next.ID...)
	*bp = buf
	if err := b.Set(buf[n:], buf[:n], nil); err != nil {
		return err
	}
	if attempts {
		buf = append(append(buf[:0], kindAttempts), next.ID...)
		if err := b.Delete(buf, nil); err != nil {
			return err
		}
	}
	if indexed(next.State) && !sameIndex(old, next) {
		buf = appendIndexKey(buf[:0], stateIdx(next.State), next.ID)
		if err := b.Set(buf, nil, nil); err != nil {
			return err
		}
	}
	if expiring(next.State) && !sameExpiry(old, next) {
		buf = appendExpiryKey(buf[:0], next.ExpireAt, next.ID)
		return b.Set(buf, nil, nil)
	}
	return nil
}

// indexed reports whether a record in state st has a state index key:
// every state but completed, the state nearly every record is in, which
// a listing walks through the record keys instead (list.go).
func indexed(st store.State) bool { return st != store.StateCompleted }

// expiring reports whether a record in state st has an expiry key: every
// state but in flight, whose records the sweep finds through their state
// index (expiry.go). So an execute writes two index keys, the claim's
// state index key and the result's expiry key, where a key of each for
// both states would be four, and two single deletes more.
func expiring(st store.State) bool { return st != store.StateInFlight }

// sameIndex reports whether old (nil: none) has next's state index key.
func sameIndex(old, next *rec) bool {
	return old != nil && old.State == next.State && indexed(old.State)
}

// sameExpiry reports whether old (nil: none) has next's expiry key.
func sameExpiry(old, next *rec) bool {
	return old != nil && old.ExpireAt == next.ExpireAt && expiring(old.State) && expiring(next.State)
}

// scratch holds buffers that a record's keys and value are encoded into
// before a batch copies them; one larger than maxScratch (a large stored
// answer) is not kept.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 64 << 10

// deleteRecord deletes r and its index keys.
func deleteRecord(b *pebble.Batch, r *rec) error {
	if err := unindex(b, r); err != nil {
		return err
	}
	if err := b.Delete(attemptsKey(r.ID), nil); err != nil {
		return err
	}
	return b.Delete(recordKey(r.ID), nil)
}

// buryRecord replaces r by the tombstone t alone under its key, with an
// expiry key at the tombstone's end.
func buryRecord(b *pebble.Batch, r *rec, t tomb) error {
	if err := unindex(b, r); err != nil {
		return err
	}
	if err := b.Delete(attemptsKey(r.ID), nil); err != nil {
		return err
	}
	if err := b.Set(recordKey(r.ID), encodeTomb(t), nil); err != nil {
		return err
	}
	return b.Set(expiryKey(t.until, r.ID), nil, nil)
}

// deleteTomb deletes the tombstone t that record id's key holds alone,
// and its expiry key.
func deleteTomb(b *pebble.Batch, id string, t tomb) error {
	if err := b.Delete(expiryKey(t.until, id), nil); err != nil {
		return err
	}
	return b.Delete(recordKey(id), nil)
}

// unindex deletes r's state index and expiry keys (those its state has).
// Each is set once and deleted once (a change of state or expiry deletes
// the old key and sets the new one), so a single delete does: when it
// meets its set in a flush or compaction both vanish, and the key of a
// record that was in flight for a moment never leaves the memtable. Were
// one ever set twice, the older set would come back as a stale key, which
// List (it checks the record's state) and the sweep (it checks the
// record's expiry and deletes the key) skip.
func unindex(b *pebble.Batch, r *rec) error {
	_, err := unindexWith(b, r, nil, nil)
	return err
}

// unindexWith is unindex for a record being replaced by next (nil: none):
// a key next keeps is not deleted. Its keys are encoded into buf (the
// batch copies them); it returns buf as grown.
func unindexWith(b *pebble.Batch, r, next *rec, buf []byte) ([]byte, error) {
	if indexed(r.State) && (next == nil || !sameIndex(r, next)) {
		buf = appendIndexKey(buf[:0], stateIdx(r.State), r.ID)
		if err := b.SingleDelete(buf, nil); err != nil {
			return buf, err
		}
	}
	if expiring(r.State) && (next == nil || !sameExpiry(r, next)) {
		buf = appendExpiryKey(buf[:0], r.ExpireAt, r.ID)
		return buf, b.SingleDelete(buf, nil)
	}
	return buf, nil
}
