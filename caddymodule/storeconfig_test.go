package caddymodule

import (
	"strings"
	"testing"
)

func TestStoreOptions(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_PASS", "pa55")
	c := StoreConfig{Addresses: []string{"rediss://app:{env.IDEMGATE_TEST_PASS}@10.0.0.5:6380/3"}}
	opts, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Addrs) != 1 || opts.Addrs[0] != "10.0.0.5:6380" || opts.Username != "app" || opts.Password != "pa55" || opts.DB != 3 || opts.TLS == nil {
		t.Errorf("options = %+v", opts)
	}
	for _, bad := range []string{"http://h:1", "redis://h:1/x", "redis:///0"} {
		if _, err := (StoreConfig{Addresses: []string{bad}}).options(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := (StoreConfig{Addresses: []string{"redis://u:secret@h:1/x"}}).options(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v must not show the password", err)
	}
}

// TestPoolKey: configs share a connection exactly when their resolved
// options are the same.
func TestPoolKey(t *testing.T) {
	key := func(c StoreConfig) string {
		t.Helper()
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		return c.poolKey(opts)
	}
	a := StoreConfig{Addresses: []string{"redis://127.0.0.1:6379"}}
	same := StoreConfig{Addresses: []string{"127.0.0.1:6379"}}
	others := []StoreConfig{
		{Addresses: []string{"redis://127.0.0.1:6380"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, KeyPrefix: "other:"},
		{Addresses: []string{"redis://127.0.0.1:6379/1"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, Password: "x"},
		{},
	}
	if key(a) != key(same) {
		t.Errorf("equal options, different keys")
	}
	seen := map[string]int{key(a): -1}
	for i, o := range others {
		k := key(o)
		if j, dup := seen[k]; dup {
			t.Errorf("config %d shares a pool key with %d: %q", i, j, k)
		}
		seen[k] = i
	}
	t.Setenv("IDEMGATE_TEST_ADDR", "127.0.0.1:7000")
	withEnv := StoreConfig{Addresses: []string{"{env.IDEMGATE_TEST_ADDR}"}}
	k1 := key(withEnv)
	t.Setenv("IDEMGATE_TEST_ADDR", "127.0.0.1:7001")
	if key(withEnv) == k1 {
		t.Errorf("placeholders not resolved before keying")
	}
	if strings.Contains(key(StoreConfig{Addresses: []string{"h:1"}, Password: "hunter2"}), "hunter2") {
		t.Errorf("pool key holds the password")
	}
}
