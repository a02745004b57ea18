package e2e

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// soakAction is what the chaos upstream does with one call.
type soakAction int

const (
	soakOK   soakAction = iota // acts, answers 201
	soakSlow                   // acts, answers 201 after soakUpstream.slow
	soak500                    // acts, answers 500
	soak429                    // does not act, answers 429 ("not done, retry")
	soakDrop                   // acts, then drops the connection without an answer
	soakActions
)

var soakActionNames = [soakActions]string{"201", "slow 201", "500", "429", "drop"}

func (a soakAction) String() string { return soakActionNames[a] }

// acted reports whether the call performed the side effect.
func (a soakAction) acted() bool { return a != soak429 }

// soakActionFor is the action of a key's exec-th call (1-based): a pure
// function of the seed, the key and the call number, so one seed replays the
// same faults for the same keys whatever the interleaving.
// Weights: 201 50%, slow 8%, 500 12%, 429 15%, drop 15%.
func soakActionFor(seed uint64, key string, exec int) soakAction {
	h := fnv.New64a()
	b := strconv.AppendUint(nil, seed, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(exec), 10)
	b = append(b, ' ')
	h.Write(append(b, key...))
	x := h.Sum64()
	x ^= x >> 33 // mix the high bits into the low ones
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	switch x %= 100; {
	case x < 50:
		return soakOK
	case x < 58:
		return soakSlow
	case x < 70:
		return soak500
	case x < 85:
		return soak429
	default:
		return soakDrop
	}
}

// soakCall is one call the upstream received.
type soakCall struct {
	exec      int // 1-based number of this call among the key's calls
	action    soakAction
	changed   bool   // the request carried the changed payload
	keyHeader string // the forwarded Idempotency-Key
}

// soakPayload is the request body of every soak delivery.
type soakPayload struct {
	Key     string `json:"key"`
	Amount  int    `json:"amount"`
	Variant string `json:"variant"` // "original" or "changed"
}

// soakUpstream is a business API with random faults: it keeps, per key,
// every call it got and what it did, which is the ground truth the soak
// checks the gateway's records against.
type soakUpstream struct {
	fake
	seed uint64
	slow time.Duration

	mu      sync.Mutex
	calls   map[string][]soakCall
	unowned []string // calls that could not be attributed to a key
}

func newSoakUpstream(t testing.TB, seed uint64, slow time.Duration) *soakUpstream {
	u := &soakUpstream{seed: seed, slow: slow, calls: map[string][]soakCall{}}
	u.fake = startFake(t, u.serve)
	return u
}

// callsOf returns a copy of the calls made for key.
func (u *soakUpstream) callsOf(key string) []soakCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]soakCall(nil), u.calls[key]...)
}

func (u *soakUpstream) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	var p soakPayload
	if err == nil {
		err = json.Unmarshal(raw, &p)
	}
	if err != nil || p.Key == "" {
		u.mu.Lock()
		u.unowned = append(u.unowned, fmt.Sprintf("%s %s: %d bytes, %v", r.Method, r.URL.Path, len(raw), err))
		u.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	n := len(u.calls[p.Key]) + 1
	c := soakCall{
		exec:      n,
		action:    soakActionFor(u.seed, p.Key, n),
		changed:   p.Variant != "original",
		keyHeader: forwardedKey(r),
	}
	u.calls[p.Key] = append(u.calls[p.Key], c)
	u.mu.Unlock()

	switch c.action {
	case soakOK, soakSlow:
		if c.action == soakSlow {
			time.Sleep(u.slow)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"D-%s-%d","key":%q,"exec":%d}`, p.Key, n, p.Key, n)
	case soak500:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"acted, then failed","key":%q,"exec":%d}`, p.Key, n)
	case soak429:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":"busy, nothing done","key":%q,"exec":%d}`, p.Key, n)
	case soakDrop:
		// The side effect happened; the answer never leaves.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
}
