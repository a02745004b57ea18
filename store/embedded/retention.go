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

// Tombstones and twin entries (see store/tombstone.go). A tombstone is one
// key t<id> beside the record's; a twin entry one key w<digest>. Each value
// starts with its expiry (8 bytes BE ms), and each has an expiry key like a
// record's, its id marked (x<expiry>!<id>, x<expiry>~<digest>: no record
// id holds those bytes), so the same sweep deletes them when they expire.
// A tombstone is written in the completion's batch, under the record's
// lock; a claim reads both under the record's lock before it decides.
const (
	kindTombstone byte = 't'
	kindTwin      byte = 'w'

	markTombstone = "!"
	markTwin      = "~"
)

func tombstoneKey(id string) []byte { return append([]byte{kindTombstone}, id...) }

func twinKey(digest string) []byte { return append([]byte{kindTwin}, digest...) }

// retention is what a change writes beside the record: a tombstone
// outliving it by tomb ms (0: none), the removal of its tombstone, a twin
// entry naming it until twinUntil (ms).
type retention struct {
	tomb      int64
	dropTomb  bool
	twin      string
	twinUntil int64
}

// tombstoneValue: expiry, completed at and status as varints, the reason.
func tombstoneValue(expires int64, r *rec) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 24+len(r.Reason)), uint64(expires))
	v = binary.AppendVarint(v, store.MillisOf(r.CompletedAt))
	v = binary.AppendVarint(v, int64(r.Status))
	return append(v, r.Reason...)
}

// twinValue: expiry, completed at as a varint, the record id.
func twinValue(expires, completedAt int64, id string) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(id)), uint64(expires))
	v = binary.AppendVarint(v, completedAt)
	return append(v, id...)
}

// expiresOf is the expiry a tombstone's or twin entry's value starts with.
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

// tombstone reads the live tombstone of id (nil: none).
func (e *Engine) tombstone(id string, now int64) (*store.Tombstone, error) {
	v, _, err := e.readRetained(tombstoneKey(id), now)
	if v == nil || err != nil {
		return nil, err
	}
	completed, n := binary.Varint(v)
	status, m := binary.Varint(v[max(n, 0):])
	if n <= 0 || m <= 0 {
		return nil, fmt.Errorf("embedded store %s: the tombstone of %s does not decode", e.dir, id)
	}
	return &store.Tombstone{ID: id, CompletedAt: time.UnixMilli(completed), Status: int(status), Reason: string(v[n+m:])}, nil
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

// retain writes what ret says about next in b, replacing the expiry keys
// of the tombstone and twin entry it overwrites.
func (e *Engine) retain(b *pebble.Batch, next *rec, ret retention) error {
	replace := func(key []byte, mark, id string, value []byte) error {
		_, old, err := e.readRetained(key, 0)
		if err != nil {
			return err
		}
		if old != 0 {
			if err := b.Delete(expiryKey(old, mark+id), nil); err != nil {
				return err
			}
		}
		if value == nil {
			return b.Delete(key, nil)
		}
		at, _, _ := expiresOf(value)
		if err := b.Set(key, value, nil); err != nil {
			return err
		}
		return b.Set(expiryKey(at, mark+id), nil, nil)
	}
	switch {
	case ret.tomb > 0:
		if err := replace(tombstoneKey(next.ID), markTombstone, next.ID, tombstoneValue(next.ExpireAt+ret.tomb, next)); err != nil {
			return err
		}
	case ret.dropTomb:
		if err := replace(tombstoneKey(next.ID), markTombstone, next.ID, nil); err != nil {
			return err
		}
	}
	if ret.twin != "" {
		return replace(twinKey(ret.twin), markTwin, ret.twin, twinValue(ret.twinUntil, store.MillisOf(next.CompletedAt), next.ID))
	}
	return nil
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

// expireRetained deletes the tombstone or twin entry that expiry key
// (at, marked) names when it expired by now, and the expiry key.
func (e *Engine) expireRetained(marked string, at, now int64) error {
	var key []byte
	switch marked[:1] {
	case markTombstone:
		key = tombstoneKey(marked[1:])
	case markTwin:
		key = twinKey(marked[1:])
	default:
		return nil
	}
	// A tombstone changes under its record's lock; a twin entry is
	// written under the completing record's, so a refresh landing
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
