package redis

import "sync"

// reports collects what a store reports through a callback (OnWaitShort,
// OnAvailability) for a test to read.
type reports[T any] struct {
	mu   sync.Mutex
	list []T
}

func (r *reports[T]) add(v T) {
	r.mu.Lock()
	r.list = append(r.list, v)
	r.mu.Unlock()
}

// all returns the reports so far.
func (r *reports[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.list...)
}

// take returns the reports so far and forgets them.
func (r *reports[T]) take() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.list
	r.list = nil
	return l
}
