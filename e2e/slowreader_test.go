package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestStalledReaderHoldsNoClaim: a client that stops reading a large answer
// (within max_response) does not keep the operation in flight. The result
// is recorded as soon as the upstream's answer is all in, so a duplicate
// replays it while the first client still has not read it; the first client
// then reads the whole answer, byte for byte.
func TestStalledReaderHoldsNoClaim(t *testing.T) {
	t.Parallel()
	// Larger than what loopback socket buffers absorb (4 MiB to send, a
	// few to receive), so a client that does not read stops the transfer.
	body := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(body)
	forEachBackend(t, func(t *testing.T, be backend) {
		var calls counter
		up := startFake(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			calls.add(r.URL.Path)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
		})
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: `
routes:
  - name: exports
    match: { path: /exports }
    key: ["{header.Idempotency-Key}"]
    max_response: 20MiB
`, extra: "op_timeout 10s"})
		// The first client sends its request and reads nothing.
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", gw.port))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /exports HTTP/1.1\r\nHost: x\r\nIdempotency-Key: export-1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		waitFor(t, func() bool { return calls.count("/exports") == 1 })

		// A duplicate gets the replay while the first client stalls. Until
		// the upstream has answered, it may get 409 (in flight).
		var dup response
		waitFor(t, func() bool {
			dup = send(t, "POST", gw.url+"/exports", []byte(`{}`), "Idempotency-Key", "export-1")
			return dup.status != http.StatusConflict
		})
		if dup.status != http.StatusCreated || dup.header.Get("Idempotent-Replayed") != "true" || sha256.Sum256(dup.body) != want {
			t.Fatalf("duplicate while the first client stalls: %d replayed=%q, %d bytes; want the replay of the 16 MiB answer",
				dup.status, dup.header.Get("Idempotent-Replayed"), len(dup.body))
		}
		if n := calls.count("/exports"); n != 1 {
			t.Errorf("upstream executions = %d, want 1", n)
		}

		// The stalled client reads on and gets the upstream's answer whole.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("the first client's answer: %v", err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusCreated || !bytes.Equal(got, body) {
			t.Fatalf("the first client's answer: %d, %d bytes, %v; want 201 and the %d bytes", resp.StatusCode, len(got), err, len(body))
		}
		if resp.Header.Get("Idempotent-Replayed") != "" {
			t.Error("the first client's answer is marked replayed")
		}
	})
}
