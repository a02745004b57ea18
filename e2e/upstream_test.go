package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is an API that knows nothing about idempotency: it counts every
// call it gets, so a test can see how often a side effect ran.
type upstream struct {
	fake
	calls counter // by path
	gates gates   // by path

	mu      sync.Mutex
	keys    map[string]string // forwarded Idempotency-Key by path (last seen)
	lengths map[string]int64  // Content-Length seen, by path
}

// bigBody is the deterministic 3 MiB body of /big.
var bigBody = func() []byte {
	b := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// binaryBody is not valid UTF-8, served as text.
var binaryBody = []byte{0xff, 0xfe, 0x00, 'o', 'k', 0x80, 0xc3, 0x28, '\n', 0x00, 0x01}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{
		keys:    map[string]string{},
		lengths: map[string]int64{},
	}
	u.fake = startFake(t, u.serve)
	return u
}

func (u *upstream) count(path string) int { return u.calls.count(path) }

func (u *upstream) seenKey(path string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.keys[path]
}

// gate makes calls to path wait until the returned func is called.
func (u *upstream) gate(path string) (open func()) { return u.gates.gate(path) }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n, _ := u.calls.add(r.URL.Path)
	u.mu.Lock()
	u.keys[r.URL.Path] = r.Header.Get("Idempotency-Key")
	u.lengths[r.URL.Path] = r.ContentLength
	u.mu.Unlock()
	u.gates.wait(r.URL.Path, nil, 20*time.Second)
	sum := sha256.Sum256(body)
	switch {
	case strings.HasPrefix(r.URL.Path, "/status/"):
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d, call %d\n", code, n)
	case r.URL.Path == "/binary":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(binaryBody)
	case r.URL.Path == "/big":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bigBody)
	default:
		id := fmt.Sprintf("D-%d", 9020+n)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/deals/"+id)
		w.Header().Add("Set-Cookie", "session=abc; Path=/")
		w.Header().Add("Set-Cookie", "deal="+id+"; Path=/")
		w.Header().Set("X-Upstream-Call", strconv.Itoa(n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"call":%d,"body_sha256":%q,"content_length":%d}`, id, n, hex.EncodeToString(sum[:]), r.ContentLength)
	}
}
