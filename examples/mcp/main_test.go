package main

import (
	"os"
	"testing"
)

// TestDemo runs the demo with the gateway binary of make test: one deal
// for a timed-out call and its retries.
func TestDemo(t *testing.T) {
	bin := os.Getenv("IDEMGATE_BIN")
	if bin == "" {
		t.Skip("IDEMGATE_BIN is not set (make test sets it)")
	}
	deals, err := run(bin, "routes.yaml", os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if deals != 1 {
		t.Fatalf("the CRM holds %d deals, want 1", deals)
	}
}
