package redis

import (
	"testing"

	"github.com/idemgate/idemgate/store"
)

var sinkHeader string

// BenchmarkEncodeRecord is the encoding Complete does for a completed
// result (5 header values): the header in wire format. The body, digest and
// external id go to Redis as they are, and the other fields are short
// numbers.
func BenchmarkEncodeRecord(b *testing.B) {
	res := benchResult(1024)
	b.ReportAllocs()
	for b.Loop() {
		sinkHeader = store.EncodeHeader(res.Header)
	}
	if store.DecodeHeader(sinkHeader).Get("Location") != "/crm/deals/deal_42" {
		b.Fatalf("round trip: %q", sinkHeader)
	}
}
