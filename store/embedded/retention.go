package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// Tombstones and twin entries (see store/retention.go).
//
// A tombstone lives in its record's own key r<id>, so that neither a
// completion nor a claim pays for it with a key or a read of its own: a
// record's value ends with the tombstone it leaves when it expires (its
// own, written by the completion that asks for one) or carries (an
// earlier completion's, when the id was claimed anew after it; an
// operator's release drops it). The claim's read of the record key finds
// a live record, or an expired one (or none) with the tombstone. When the
// sweep finds a record expired with its tombstone still to live, it
// rewrites the key into the tombstone alone (opTomb, a few bytes) and
// moves its expiry key to the tombstone's end; at that end the same
// sweep deletes it. Every reader of records takes such a key as no record.
//
// A twin entry is one key w<digest>; its value starts with its expiry (8
// bytes BE ms), and it has an expiry key like a record's, its digest
// marked (x<expiry>~<digest>: no record id holds that byte), so the same
// sweep deletes it when it expires. It is written in the completion's
// batch; a claim with a twin digest reads it under the record's lock.
const (
	kindTwin byte = 'w'

	markTwin = "~"
)

func twinKey(digest string) []byte { return append([]byte{kindTwin}, digest...) }

// tomb is the tombstone a record key holds: until is its end (ms; 0:
// none), then what it tells of the completed record.
type tomb struct {
	until       int64
	completedAt int64
	status      int
	reason      string
}

// tombOf is the tombstone a completed record r leaves, outliving it by
// ms.
func tombOf(r *rec, ms int64) tomb {
	return tomb{until: r.ExpireAt + ms, completedAt: store.MillisOf(r.CompletedAt), status: r.Status, reason: r.Reason}
}

// view is t for a caller, as the tombstone of record id.
func (t tomb) view(id string) *store.Tombstone {
	return &store.Tombstone{ID: id, CompletedAt: time.UnixMilli(t.completedAt), Status: t.status, Reason: t.reason}
}

// retention is what a change writes beside the record: a tombstone
// outliving it by tomb ms (0: the one it carries, if any), the removal
// of its tombstone, a twin entry naming it until twinUntil (ms).
type retention struct {
	tomb      int64
	dropTomb  bool
	twin      string
	twinUntil int64
}

// tombAfter is the tombstone next carries after a change with ret, given
// the one its key held (past) at now.
func (ret retention) tombAfter(next *rec, past tomb, now int64) tomb {
	switch {
	case ret.tomb > 0:
		return tombOf(next, ret.tomb)
	case ret.dropTomb, past.until <= now:
		return tomb{}
	}
	return past
}

// twinValue: expiry, completed at as a varint, the record id.
func twinValue(expires, completedAt int64, id string) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(id)), uint64(expires))
	v = binary.AppendVarint(v, completedAt)
	return append(v, id...)
}

// expiresOf is the expiry a twin entry's value starts with.
func expiresOf(v []byte) (int64, []byte, bool) {
	if len(v) < 8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(v)), v[8:], true
}

// readRetained reads key's value when it lives at now: nil when it
// does not exist or expired.
func (e *Engine) readRetained(key []byte, now int64) ([]byte, int64, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, e.readErr(err)
	}
	defer closer.Close()
	at, rest, ok := expiresOf(v)
	if !ok {
		return nil, 0, fmt.Errorf("embedded store %s: %q does not decode", e.dir, key)
	}
	if at <= now {
		return nil, at, nil
	}
	return append([]byte(nil), rest...), at, nil
}

// twinOf reads the live twin entry of digest (nil: none).
func (e *Engine) twinOf(digest string, now int64) (*store.Twin, error) {
	if digest == "" {
		return nil, nil
	}
	v, _, err := e.readRetained(twinKey(digest), now)
	if v == nil || err != nil {
		return nil, err
	}
	completed, n := binary.Varint(v)
	if n <= 0 || !store.ValidID(string(v[n:])) {
		return nil, fmt.Errorf("embedded store %s: the twin entry %s does not decode", e.dir, digest)
	}
	return &store.Twin{ID: string(v[n:]), CompletedAt: time.UnixMilli(completed)}, nil
}

// retain writes the twin entry ret names next in (none: nothing) in b,
// replacing the expiry key of the entry it overwrites.
func (e *Engine) retain(b *pebble.Batch, next *rec, ret retention) error {
	if ret.twin == "" {
		return nil
	}
	key := twinKey(ret.twin)
	_, old, err := e.readRetained(key, 0)
	if err != nil {
		return err
	}
	if old != 0 {
		if err := b.Delete(expiryKey(old, markTwin+ret.twin), nil); err != nil {
			return err
		}
	}
	if err := b.Set(key, twinValue(ret.twinUntil, store.MillisOf(next.CompletedAt), next.ID), nil); err != nil {
		return err
	}
	return b.Set(expiryKey(ret.twinUntil, markTwin+ret.twin), nil, nil)
}

// completion is the retention of a completion: the tombstone it asks for
// and its twin entry, from now.
func completion(req store.CompleteRequest, now int64) retention {
	ret := retention{tomb: store.Millis(req.Tombstone)}
	if twin, window := req.TwinEntry(); twin != "" {
		ret.twin, ret.twinUntil = twin, now+store.Millis(window)
	}
	return ret
}

// expireRetained deletes the twin entry that expiry key (at, marked)
// names when it expired by now, and the expiry key.
func (e *Engine) expireRetained(marked string, at, now int64) error {
	if marked[:1] != markTwin {
		return nil
	}
	key := twinKey(marked[1:])
	// A twin entry is written under the completing record's lock, so a refresh landing
	// between this read and the delete can be lost: the detector then
	// misses one twin, never reports a false one.
	unlock, err := e.locks.lock(context.Background(), marked[1:], e.opts.OpTimeout)
	if err != nil {
		return nil // busy: the next sweep
	}
	defer unlock()
	_, cur, err := e.readRetained(key, 0)
	if err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	if cur != 0 && cur <= now {
		err = b.Delete(key, nil)
	}
	if err == nil && cur != at {
		err = b.Delete(expiryKey(at, marked), nil) // left behind by a refresh
	}
	if err == nil && cur != 0 && cur <= now {
		err = b.Delete(expiryKey(cur, marked), nil)
	}
	if err == nil && !b.Empty() {
		err = b.Commit(pebble.NoSync)
	}
	return err
}
