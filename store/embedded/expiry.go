package embedded

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// sweepBatch bounds the expiry keys one sweep step reads.
const sweepBatch = 1000

// sweepLoop deletes expired records every sweepEvery, so that DIR
// follows the live set (Pebble's compactions give the space back).
func (e *Engine) sweepLoop() {
	e.every(sweepEvery, func() {
		for {
			n, err := e.sweep()
			if err != nil {
				e.opts.OnError(fmt.Errorf("store: embedded store %s: expiry: %w", e.dir, err))
			}
			if err != nil || n < sweepBatch {
				break
			}
		}
		e.compactExpired()
	})
}

// compactExpired compacts the database once the records deleted since the
// last compaction amount to half a memtable: Pebble would otherwise keep
// expired records' space until enough new writes came to compact them,
// and DIR would not shrink after a burst.
func (e *Engine) compactExpired() {
	if e.swept.Load() < e.opts.MemTableSize/2 || e.full.is() {
		return
	}
	if err := e.enter(); err != nil {
		return
	}
	defer e.leave()
	e.swept.Store(0)
	if err := e.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		e.opts.OnError(fmt.Errorf("store: embedded store %s: compact expired records: %w", e.dir, err))
	}
}

// sweep deletes (or turns into their tombstones) up to sweepBatch
// expired records (a range scan of the expiry keys up to now) and
// returns how many keys it looked at.
func (e *Engine) sweep() (int, error) {
	if e.full.is() {
		return 0, nil // deletes are writes too: after the disk has room
	}
	if err := e.enter(); err != nil {
		return 0, nil
	}
	defer e.leave()
	now := e.now()
	it, err := e.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{kindExpiry},
		UpperBound: expiryKey(now+1, ""),
	})
	if err != nil {
		return 0, err
	}
	type due struct {
		at int64
		id string
	}
	var dues []due
	for it.First(); it.Valid() && len(dues) < sweepBatch; it.Next() {
		if at, id, ok := parseExpiryKey(it.Key()); ok {
			dues = append(dues, due{at, id})
		}
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, e.readErr(err)
	}
	for _, d := range dues {
		var err error
		if store.ValidID(d.id) {
			err = e.expire(d.id, d.at, true, now)
		} else {
			err = e.expireRetained(d.id, d.at, now) // a twin entry's
		}
		if err != nil {
			return len(dues), err
		}
	}
	return len(dues), e.sweepInFlight(now)
}

// sweepInFlight deletes up to sweepBatch expired records in flight, which
// have no expiry key (see expiring): a walk of their state index, which
// holds the records in flight now and those a crash or a lost completion
// left (few, whatever DIR holds).
func (e *Engine) sweepInFlight(now int64) error {
	from := indexKey(stateIdx(store.StateInFlight), "")
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: []byte{from[0], from[1] + 1}})
	if err != nil {
		return e.readErr(err)
	}
	var ids []string
	for it.First(); it.Valid() && len(ids) < sweepBatch; it.Next() {
		ids = append(ids, string(it.Key()[2:]))
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return e.readErr(err)
	}
	for _, id := range ids {
		if err := e.expire(id, 0, false, now); err != nil {
			return err
		}
	}
	return nil
}

// expire deletes record id when it expired by now, or turns it into the
// tombstone it leaves when that lives on (see retention.go), or deletes
// the tombstone alone when it expired; and deletes the expiry key at that
// led the sweep to it (keyed; else its state index key did).
func (e *Engine) expire(id string, at int64, keyed bool, now int64) error {
	unlock, err := e.locks.lock(context.Background(), id, e.opts.OpTimeout)
	if err != nil {
		return nil // busy: the next sweep
	}
	defer unlock()
	s, err := e.slotOf(id)
	if err != nil {
		return err
	}
	r, t := s.rec, s.tomb
	if !keyed && (r == nil || r.ExpireAt > now) {
		return nil // in flight, and kept in memory for its completion
	}
	defer e.hot.drop(id) // whatever this writes, the key is read again
	b := e.db.NewBatch()
	defer b.Close()
	expires := t.until // the key's expiry key: the record's, or the tombstone's alone
	switch {
	case r != nil:
		expires = r.ExpireAt
		if r.ExpireAt > now {
			break
		}
		if t.until > now {
			err = buryRecord(b, r, t)
		} else {
			err = deleteRecord(b, r)
		}
		e.swept.Add(int64(len(r.Body)) + 256)
	case t.until != 0 && t.until <= now:
		err = deleteTomb(b, id, t)
	}
	if err == nil && keyed && (expires != at || r != nil && !expiring(r.State)) {
		// Left behind: by a version that gave records in flight an
		// expiry key, or by a write that should not have.
		err = b.Delete(expiryKey(at, id), nil)
	}
	if err == nil && !b.Empty() {
		err = b.Commit(pebble.NoSync)
	}
	return err
}
