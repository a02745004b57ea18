package local

import (
	"container/heap"
	"time"
)

// expiryHeap orders the slots by their record's expiry, soonest first.
type expiryHeap []*slot

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].cur.expireAt < h[j].cur.expireAt }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *expiryHeap) Push(x any) {
	s := x.(*slot)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *expiryHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapIdx = -1
	return s
}

// add makes r a new record: map, state index, expiry heap. Called with mu
// held.
func (e *Engine) add(r *rec) {
	s := &slot{cur: r}
	e.slots[r.ID] = s
	e.index.ReplaceOrInsert(keyOf(r))
	heap.Push(&e.expiry, s)
	e.liveBytes += r.size
}

// replace publishes r as s's record. Called with mu held.
func (e *Engine) replace(s *slot, r *rec) {
	old := s.cur
	if old.State != r.State {
		e.index.Delete(keyOf(old))
		e.index.ReplaceOrInsert(keyOf(r))
	}
	s.cur = r
	e.liveBytes += r.size - old.size
	if old.expireAt != r.expireAt {
		heap.Fix(&e.expiry, s.heapIdx)
	}
}

// drop forgets an expired record. Called with mu held.
func (e *Engine) drop(s *slot) {
	delete(e.slots, s.cur.ID)
	e.index.Delete(keyOf(s.cur))
	if s.heapIdx >= 0 {
		heap.Remove(&e.expiry, s.heapIdx)
	}
	e.liveBytes -= s.cur.size
}

// sweepBatch bounds the records one sweep drops while holding the lock.
const sweepBatch = 1000

// sweepLoop drops expired records from memory every sweepEvery, so
// memory and the next snapshot follow the live set.
func (e *Engine) sweepLoop() {
	defer e.done.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		for e.sweep() == sweepBatch {
		}
	}
}

// sweep drops up to sweepBatch expired records and returns how many.
func (e *Engine) sweep() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	n := 0
	for n < sweepBatch && len(e.expiry) > 0 && e.expiry[0].cur.expireAt <= now {
		e.drop(e.expiry[0])
		n++
	}
	return n
}
