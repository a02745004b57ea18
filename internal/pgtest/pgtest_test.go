package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartCreateDatabase starts a cluster, makes a database in it and
// reads the server's version through the URL it gives.
func TestStartCreateDatabase(t *testing.T) {
	c := Start(t)
	url := c.CreateDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil || v == "" {
		t.Fatalf("SHOW server_version: %q, %v", v, err)
	}
	c.Kill()
	if c.Running() {
		t.Fatal("running after Kill")
	}
	c.Restart(t)
	conn2, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect after restart: %v", err)
	}
	conn2.Close(ctx)
}
