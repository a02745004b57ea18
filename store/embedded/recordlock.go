package embedded

import (
	"context"
	"errors"
	"hash/maphash"
	"time"
)

// lockStripes is how many locks the records share: two records wait for
// each other only when their ids hash alike.
const lockStripes = 4096

// recordLocks serialise the read-modify-write of each record. A lock is
// a one-slot channel so that taking it can time out.
type recordLocks struct {
	seed    maphash.Seed
	stripes [lockStripes]chan struct{}
}

func (l *recordLocks) init() {
	l.seed = maphash.MakeSeed()
	for i := range l.stripes {
		l.stripes[i] = make(chan struct{}, 1)
	}
}

// errLockTimeout: another call held the record longer than OpTimeout.
var errLockTimeout = errors.New("the record stayed busy (an earlier write has not finished)")

// lock takes id's lock, waiting at most timeout or until ctx ends, and
// returns its release.
func (l *recordLocks) lock(ctx context.Context, id string, timeout time.Duration) (func(), error) {
	ch, err := l.take(ctx, id, timeout)
	if err != nil {
		return nil, err
	}
	return func() { <-ch }, nil
}

// take is lock returning the lock itself, which a receive gives back
// (no allocation).
func (l *recordLocks) take(ctx context.Context, id string, timeout time.Duration) (chan struct{}, error) {
	ch := l.stripes[maphash.String(l.seed, id)%lockStripes]
	select {
	case ch <- struct{}{}:
		return ch, nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ch <- struct{}{}:
		return ch, nil
	case <-t.C:
		return nil, errLockTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
