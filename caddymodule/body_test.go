package caddymodule

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/quic-go/quic-go/http3"
)

// bodyRecord is the 8-byte record that request seq's body repeats.
func bodyRecord(seq int) string { return fmt.Sprintf("%07d\n", seq%10_000_000) }

// earlyUpstream answers 401 as soon as it has a request's head, then reads
// the body (once the gateway's handler for that request returned, when
// answered has a channel for it), checking that every byte it gets belongs
// to that request.
type earlyUpstream struct {
	answered sync.Map // X-Seq → chan closed when the gateway's handler returned
	received atomic.Int64
	done     atomic.Int64 // requests handled
	complete atomic.Int64 // bodies received whole
	foreign  atomic.Int64 // bodies with bytes of another request
	firstBad atomic.Value
}

func (u *earlyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer u.done.Add(1)
	seq, _ := strconv.Atoi(r.Header.Get("X-Seq"))
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusUnauthorized)
	if hs, ok := w.(http3.HTTPStreamer); ok {
		// HTTP/3: the answer is complete (the stream's sending side is
		// closed) while the request body is still coming in.
		_ = hs.HTTPStream().Close()
	} else {
		_ = http.NewResponseController(w).Flush()
	}
	if ch, ok := u.answered.Load(r.Header.Get("X-Seq")); ok {
		select {
		case <-ch.(chan struct{}):
		case <-time.After(10 * time.Second):
		}
	}
	// Whatever arrives must be this request's own bytes.
	want := []byte(bodyRecord(seq))
	got, _ := io.ReadAll(r.Body)
	for off := 0; off+len(want) <= len(got); off += len(want) {
		if rec := got[off : off+len(want)]; !bytes.Equal(rec, want) {
			if u.foreign.Add(1) == 1 {
				u.firstBad.Store(fmt.Sprintf("request %d got %q at offset %d", seq, rec, off))
			}
			break
		}
	}
	u.received.Add(int64(len(got)))
	if int64(len(got)) == r.ContentLength {
		u.complete.Add(1)
	}
}

// proxyTo is the rest of the chain as reverse_proxy runs it: one round
// trip through Caddy's own HTTP transport, the answer copied back, and the
// request body left to the transport, which closes it when it is done.
func proxyTo(rt http.RoundTripper, target string) caddyhttp.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "", target
		resp, err := rt.RoundTrip(out)
		if err != nil {
			return caddyhttp.Error(http.StatusBadGateway, err)
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, err = io.Copy(w, resp.Body)
		return err
	}
}

// selfSigned is a TLS certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "upstream.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestBodyBufferNotReusedWhileSent: an upstream answers 401 before reading
// a 1 MiB request body and reads it only after the gateway's handler for
// that request returned, while other requests are being read into pooled
// buffers. The transport is then still sending the body after the handler
// returned (Caddy's HTTP/3 transport sends it from a goroutine of its own
// and does not wait for it), so the buffer behind the body must not go back
// to the pool before the transport closes the body: no upstream may receive
// bytes of another request's body, and the race detector must stay quiet.
// Guarded and unguarded (no key) requests alternate; both forward the
// pooled body.
func TestBodyBufferNotReusedWhileSent(t *testing.T) {
	// Not in parallel: it loads both cores for a while, and the tests that
	// time leases would then measure the machine.
	for _, tc := range []struct {
		version         string
		workers, rounds int
	}{
		// HTTP/1.1: Go's transport finishes the body (or gives up on it
		// within 50ms) before it hands over the response, so here the
		// upstream reads at once: bodies go out whole through the pooled
		// body.
		{"1.1", 4, 3},
		{"3", 6, 3},
	} {
		// The subtests share the default embedded store (Caddy's data
		// directory), whose records do not take the key prefix: one at a
		// time.
		t.Run("HTTP/"+tc.version, func(t *testing.T) {
			h, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    require_key: false
    max_body: 4MiB
`, nil)
			up := &earlyUpstream{}
			transport := &reverseproxy.HTTPTransport{Versions: []string{tc.version}}
			var target string
			if tc.version == "3" {
				pc, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := &http3.Server{Handler: up, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})}
				go func() { _ = srv.Serve(pc) }()
				t.Cleanup(func() { _ = srv.Close(); _ = pc.Close() })
				target = pc.LocalAddr().String()
				transport.TLS = &reverseproxy.TLSConfig{InsecureSkipVerify: true}
			} else {
				srv := httptest.NewServer(up)
				t.Cleanup(srv.Close)
				target = strings.TrimPrefix(srv.URL, "http://")
			}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			t.Cleanup(cancel)
			if err := transport.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = transport.Cleanup() })
			next := proxyTo(transport, target)

			gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.version == "3" {
					ch := make(chan struct{})
					up.answered.Store(r.Header.Get("X-Seq"), ch)
					defer close(ch)
				}
				r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, &caddyhttp.Server{})
				if err := h.ServeHTTP(w, r, next); err != nil {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}))
			t.Cleanup(gateway.Close)

			const size = 1 << 20
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: tc.workers}}
			var wg sync.WaitGroup
			errs := make(chan error, tc.workers*tc.rounds)
			for w := range tc.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tc.rounds {
						seq := w*tc.rounds + i + 1
						body := bytes.Repeat([]byte(bodyRecord(seq)), size/8)
						req, _ := http.NewRequest("POST", gateway.URL+"/deals", bytes.NewReader(body))
						req.Header.Set("X-Seq", strconv.Itoa(seq))
						if seq%2 == 0 {
							req.Header.Set("Idempotency-Key", "early-"+strconv.Itoa(seq))
						}
						resp, err := client.Do(req)
						if err != nil {
							errs <- err
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusUnauthorized {
							errs <- fmt.Errorf("request %d: status %d, want the upstream's 401", seq, resp.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// The upstream handlers finish on their own: wait for the
			// last bodies (bounded).
			n := int64(tc.workers * tc.rounds)
			for deadline := time.Now().Add(20 * time.Second); up.done.Load() < n && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("upstream received %d MiB; %d of %d bodies whole, %d with foreign bytes", up.received.Load()>>20, up.complete.Load(), n, up.foreign.Load())
			if f := up.foreign.Load(); f > 0 {
				t.Errorf("%d upstream calls received bytes of another request's body; first: %s", f, up.firstBad.Load())
			}
			// A body the transport had not started on when the handler
			// returned is cut short, as Go's server cuts short its own
			// request bodies then (and a transport may give up on a slow
			// one); one it had started on goes out whole.
			if c := up.complete.Load(); c == 0 {
				t.Errorf("%d of %d request bodies reached the upstream whole", c, n)
			}
		})
	}
}
