package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The variant sets. Each set runs in rounds of its own, its variants
// interleaved.
const (
	// setShared: every process on all CPUs, as on one small machine.
	setShared = "shared"
	// setPinned: a second gateway process pinned to CPU 0, everything
	// else (load generator, upstream, Redis) on CPU 1: what the gateway
	// itself costs, without its neighbours.
	setPinned = "pinned"
	// setTwo: like setShared, at two keep-alive connections (-conns2):
	// the latency one request pays when requests do not queue for the
	// CPUs, and the CPU each variant adds.
	setTwo = "two"
)

// sets are the variant sets, in the order they run.
var sets = []string{setShared, setPinned, setTwo}

// The sites of a gateway process (see caddyfileTemplate).
const (
	sitePlain    = "plain"    // reverse_proxy only
	siteRedis    = "redis"    // idempotency on redis-server + reverse_proxy
	siteEmbedded = "embedded" // idempotency on the embedded store + reverse_proxy
	siteStatic   = "static"   // respond
	sitePostgres = "postgres" // idempotency on a Postgres cluster + reverse_proxy (postgresSiteTemplate)
)

// variant is one kind of load.
type variant struct {
	name         string
	set          string
	site         string
	path         string
	keys         string // "unique", "replay", "conflict"
	wantStatus   int
	wantReplayed bool
	// executes: every answer comes from one upstream call; otherwise no
	// answer may call the upstream at all.
	executes bool
	// store is what answers the variant's store calls: "redis",
	// "embedded", "postgres", or "" (none: Redis must see no command).
	store string
}

var allVariants = []variant{
	{name: "plain", set: setShared, site: sitePlain, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true},
	{name: "execute", set: setShared, site: siteRedis, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "redis"},
	{name: "replay", set: setShared, site: siteRedis, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "redis"},
	{name: "conflict", set: setShared, site: siteRedis, path: "/v1/deals", keys: "conflict", wantStatus: 409, store: "redis"},
	{name: "passthrough", set: setShared, site: siteRedis, path: "/v1/notes", keys: "unique", wantStatus: 201, executes: true},
	{name: "static", set: setShared, site: siteStatic, path: "/v1/deals", keys: "unique", wantStatus: 201},
	{name: "embedded-execute", set: setShared, site: siteEmbedded, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "embedded"},
	{name: "embedded-replay", set: setShared, site: siteEmbedded, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "embedded"},
	{name: "pg-execute", set: setShared, site: sitePostgres, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "postgres"},
	{name: "pg-replay", set: setShared, site: sitePostgres, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "postgres"},

	{name: "pinned-plain", set: setPinned, site: sitePlain, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true},
	{name: "pinned-execute", set: setPinned, site: siteRedis, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "redis"},
	{name: "pinned-replay", set: setPinned, site: siteRedis, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "redis"},
	{name: "pinned-passthrough", set: setPinned, site: siteRedis, path: "/v1/notes", keys: "unique", wantStatus: 201, executes: true},
	{name: "pinned-static", set: setPinned, site: siteStatic, path: "/v1/deals", keys: "unique", wantStatus: 201},

	{name: "two-plain", set: setTwo, site: sitePlain, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true},
	{name: "two-execute", set: setTwo, site: siteRedis, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "redis"},
	{name: "two-replay", set: setTwo, site: siteRedis, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "redis"},
	{name: "two-embedded-execute", set: setTwo, site: siteEmbedded, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "embedded"},
	{name: "two-embedded-replay", set: setTwo, site: siteEmbedded, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "embedded"},
	{name: "two-pg-execute", set: setTwo, site: sitePostgres, path: "/v1/deals", keys: "unique", wantStatus: 201, executes: true, store: "postgres"},
	{name: "two-pg-replay", set: setTwo, site: sitePostgres, path: "/v1/deals", keys: "replay", wantStatus: 201, wantReplayed: true, store: "postgres"},
	{name: "two-static", set: setTwo, site: siteStatic, path: "/v1/deals", keys: "unique", wantStatus: 201},
}

// plainOf returns the name of the plain variant of v's set.
func plainOf(set string) string {
	return prefixOf(set) + "plain"
}

// prefixOf is the beginning of the names of set's variants.
func prefixOf(set string) string {
	switch set {
	case setPinned:
		return "pinned-"
	case setTwo:
		return "two-"
	}
	return ""
}

func findVariant(name string) (variant, bool) {
	for _, v := range allVariants {
		if v.name == name {
			return v, true
		}
	}
	return variant{}, false
}

// selectVariants returns the variants named in list (all when empty)
// that belong to one of the sets named in setList (all when empty).
func selectVariants(list, setList string) ([]variant, error) {
	vs := allVariants
	if list != "" {
		vs = nil
		for _, name := range strings.Split(list, ",") {
			v, ok := findVariant(strings.TrimSpace(name))
			if !ok {
				return nil, fmt.Errorf("unknown variant %q", name)
			}
			vs = append(vs, v)
		}
	}
	if setList == "" {
		return vs, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(setList, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(sets, name) {
			return nil, fmt.Errorf("unknown set %q (want %s)", name, strings.Join(sets, ", "))
		}
		want[name] = true
	}
	var out []variant
	for _, v := range vs {
		if want[v.set] {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no variant of -variants %q is in -sets %q", list, setList)
	}
	return out, nil
}

// withoutStore returns vs without the variants on store.
func withoutStore(vs []variant, store string) []variant {
	var out []variant
	for _, v := range vs {
		if v.store != store {
			out = append(out, v)
		}
	}
	return out
}

// ofSet returns the variants of vs in set, in their order.
func ofSet(vs []variant, set string) []variant {
	var out []variant
	for _, v := range vs {
		if v.set == set {
			out = append(out, v)
		}
	}
	return out
}

const (
	replayKeys   = 256 // completed records the replay variants cycle through
	conflictKeys = 64  // records held as outcome unknown
)

// requestSpec describes the requests of one load run: the same bytes for
// every variant (the body, Authorization, Content-Type), a path and an
// Idempotency-Key that is new for every request ("unique") or cycles
// through a fixed set of nkeys keys ("replay", "conflict").
type requestSpec struct {
	host   string // Host header: the address
	path   string
	keys   string
	prefix string // the keys' common beginning
	nkeys  int    // replay and conflict: how many keys
}

// requestSpec returns the requests of v against addr. tag makes the
// unique keys of one run differ from every other run's.
func (e *env) requestSpec(v variant, addr, tag string) requestSpec {
	r := requestSpec{host: addr, path: v.path, keys: v.keys}
	switch v.keys {
	case "replay":
		r.prefix, r.nkeys = "r-"+e.runID+"-", replayKeys
	case "conflict":
		r.prefix, r.nkeys = "h-"+e.runID+"-", conflictKeys
	default:
		r.prefix = e.runID + "-" + tag + "-"
	}
	return r
}

// set is the key set of the requests (see keySet).
func (r requestSpec) set() string { return strings.TrimSuffix(r.prefix, "-") }

// A requestFunc appends one raw HTTP/1.1 request to dst. conn is the
// connection's number and seq the request's number on that connection, so
// every request of a run can get a key of its own.
type requestFunc func(dst []byte, conn, seq int) []byte

// raw returns the request maker of the Go load generator.
func (r requestSpec) raw() requestFunc {
	head := "POST " + r.path + " HTTP/1.1\r\nHost: " + r.host + "\r\nUser-Agent: idemgate-bench\r\n" +
		"Content-Type: application/json\r\nAuthorization: " + benchAuth + "\r\n" +
		"Content-Length: " + strconv.Itoa(len(requestBody)) + "\r\nIdempotency-Key: "
	tail := "\r\n\r\n" + requestBody
	return func(dst []byte, conn, seq int) []byte {
		dst = append(dst, head...)
		dst = append(dst, r.prefix...)
		if r.nkeys > 0 {
			dst = strconv.AppendInt(dst, int64((conn*31+seq)%r.nkeys), 10)
		} else {
			dst = strconv.AppendInt(dst, int64(conn), 10)
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, int64(seq), 10)
		}
		return append(dst, tail...)
	}
}

// benchAuth is every request's Authorization header (the routes' scope).
const benchAuth = "Bearer sk_bench_4f1c9a"

// requestBody is the JSON every request sends (about 500 bytes).
const requestBody = `{"title":"Acme Corp annual renewal","amount":4200,"currency":"EUR",` +
	`"customer_id":"cus_9s6XKzkNRiz8i3","owner":"sales-emea-7","stage":"closed_won",` +
	`"items":[{"sku":"SKU-00017","qty":3,"price":1200.00,"note":"platform licence"},` +
	`{"sku":"SKU-00042","qty":1,"price":600.00,"note":"onboarding"}],` +
	`"meta":{"source":"crm-webhooks","delivery_attempt":1,"trace":"5b8aa5a2d2c872e8321cf37308d69df2"},` +
	`"notes":"renewal negotiated by the regional team; invoice quarterly; net 30; contact finance@acme.example"}`
