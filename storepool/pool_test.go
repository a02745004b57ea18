package storepool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// fakeEngine counts its closes; nothing else of it is called.
type fakeEngine struct {
	store.Engine
	closed *atomic.Int32
}

func (e fakeEngine) Close() error { e.closed.Add(1); return nil }

// fakeModule opens a fakeEngine under key.
type fakeModule struct {
	key    string
	opened *atomic.Int32
	closed *atomic.Int32
}

func (fakeModule) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "idempotency.stores.fake"}
}
func (m fakeModule) PoolKey() string        { return m.key }
func (m fakeModule) Timeout() time.Duration { return time.Second }
func (m fakeModule) OpenEngine() (store.Engine, error) {
	m.opened.Add(1)
	return fakeEngine{closed: m.closed}, nil
}

// named answers every action with its name as the verdict.
type named string

func (n named) CheckOutcome(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, string, error) {
	return rec, string(n), nil
}
func (n named) Run(_ context.Context, rec *store.Record, _ store.Action) (*store.Record, int, error) {
	return rec, len(n), nil
}

// TestPoolAcrossReload: a reload's config shares the open engine; the
// store is listed once, with the newest config's routes, and each record's
// action goes to the handler whose config has its route (the newest one
// for a route no config has); the engine closes once the last use is
// retired and its last request has left.
func TestPoolAcrossReload(t *testing.T) {
	var opened, closed atomic.Int32
	m := fakeModule{key: "k", opened: &opened, closed: &closed}
	p := New()
	old, err := p.Open(m, []config.Resolved{{Name: "deals", TTL: time.Hour}, {Name: "gone"}}, named("old"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	reloaded, err := p.Open(m, []config.Resolved{{Name: "deals", TTL: 2 * time.Hour}}, named("reloaded"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if opened.Load() != 1 || old.Engine() == nil || p.Uses(old) != 2 {
		t.Fatalf("opened %d engines, %d uses; want one engine, two uses", opened.Load(), p.Uses(old))
	}
	live := p.Live()
	if len(live) != 1 || live[0].Routes["deals"].TTL != 2*time.Hour || live[0].Tag == "" {
		t.Fatalf("live stores %+v; want one, with the newest config's deals", live)
	}
	for route, want := range map[string]string{"deals": "reloaded", "gone": "old", "unknown": "reloaded"} {
		if _, got, _ := live[0].Actions.CheckOutcome(context.Background(), &store.Record{Route: route}, store.Action{}); got != want {
			t.Errorf("a record of route %s went to %s, want %s", route, got, want)
		}
	}
	if one := old.Live(); len(one.Routes) != 2 || one.Tag != live[0].Tag {
		t.Errorf("one use's view: %+v", one)
	}

	old.Enter() // a request of the old config still running
	if err := old.Retire(); err != nil {
		t.Fatal(err)
	}
	if err := reloaded.Retire(); err != nil {
		t.Fatal(err)
	}
	if len(p.Live()) != 0 || closed.Load() != 0 {
		t.Fatalf("after both retired: %d listed, %d closes; want none listed, still open", len(p.Live()), closed.Load())
	}
	old.Leave()
	if closed.Load() != 1 {
		t.Fatalf("%d closes after the last request left, want 1", closed.Load())
	}
}
