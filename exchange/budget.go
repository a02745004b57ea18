package exchange

import (
	"errors"
	"sync/atomic"
)

// ErrBusy: the request body would take the bytes of request bodies the
// process holds past its budget (max_buffered). Nothing was claimed.
var ErrBusy = errors.New("too many request body bytes are held at once")

// buffered is the bytes of request bodies the process holds now, whatever
// handler or config read them: one count for the whole process, so that it
// outlives config reloads and bounds every site's handler together.
var buffered atomic.Int64

// Buffered returns the bytes of request bodies the process holds now.
func Buffered() int64 { return buffered.Load() }

// reserve counts n more bytes held, unless budget is positive and the
// count would pass it; it reports whether it counted them.
func reserve(n, budget int64) bool {
	if budget <= 0 {
		buffered.Add(n)
		return true
	}
	for {
		cur := buffered.Load()
		if cur+n > budget {
			return false
		}
		if buffered.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// unreserve counts n bytes no longer held.
func unreserve(n int64) {
	if n != 0 {
		buffered.Add(-n)
	}
}
