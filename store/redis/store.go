// Package redis is the Redis record store: it keeps idempotency records in
// Redis, behind the store.Engine contract, and is the Caddy module
// idempotency.stores.redis (module.go).
//
// A record is one Redis string under prefix + "{" + tag + "}" + id (its
// stored form: blob.go), where the tag is the id's first three characters:
// 4096 hash tags for the hex ids of keying.KeyID, so records spread over
// the slots of a Cluster. The records in flight, held and released are
// indexed by state for operators to page through: sorted sets whose
// members are record ids scored with the record's expiry time, so
// operators list held records without scanning Redis; on a Cluster each
// tag has its own, prefix + "{" + tag + "}:idx:" + state, in the record's
// slot, and on a single node one per state serves all (see IndexKey).
// Completed records, the bulk, have no index and are listed by SCAN.
// Every state change is one Lua script on that slot (EVALSHA, falling back
// to EVAL once after a script cache flush): one round trip, atomic,
// Cluster-safe; it moves the record between indexes in the same step. A
// claim of a new key and a completion are each a single SET in their
// script. Scripts read the time from the Redis server (TIME), never from
// the gateway's clock, so several gateways with skewed clocks agree on
// lease expiry; only a completion's completed-at time is the store's
// estimate of the Redis clock (learnt from the claims' replies), which
// spares the completion a TIME.
//
// Claims are fenced by a token chosen by the claimant: Renew, Complete,
// Release and MarkUnknown succeed only while the record still carries that
// token. A false result means someone else owns the record now; it is not an
// error. The scripts are safe to retry with the same token (a Claim whose
// reply was lost and is sent again still reports the claim as the caller's).
//
// Redis 7.0 or newer is required (SET with NX and GET together; scripts
// that read TIME and then write rely on effects replication). Open works with a single node,
// Sentinel (MasterName) and Cluster. The embedded store is another engine
// behind the same contract (store.Engine): package store/embedded.
package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of the Redis engine's options.
const (
	DefaultKeyPrefix = "idemgate:"
	DefaultDialTime  = 2 * time.Second
	// DefaultWaitTimeout bounds a WAIT when Options.WaitReplicas is set.
	DefaultWaitTimeout = 100 * time.Millisecond
)

// Options configure Open.
type Options struct {
	// Addrs are host:port addresses: one for a single node, the seed nodes
	// for Cluster, the Sentinels when MasterName is set.
	Addrs []string
	// MasterName selects Sentinel failover to this master.
	MasterName string
	// Cluster selects Redis Cluster.
	Cluster bool
	// Username and Password authenticate to Redis (the data nodes; the
	// Sentinels themselves are asked without credentials).
	Username, Password string
	// DB is the database number (single node and Sentinel only).
	DB int
	// TLS enables TLS with this configuration.
	TLS *tls.Config
	// KeyPrefix precedes every record key; default "idemgate:".
	KeyPrefix string
	// PoolSize is the number of connections per node; default 10*GOMAXPROCS.
	PoolSize int
	// DialTimeout bounds connecting; OpTimeout bounds every store call.
	// Both default to 2s.
	DialTimeout, OpTimeout time.Duration

	// WaitReplicas, when above 0, makes Claim and Complete wait until that
	// many replicas have acknowledged their write: a Redis WAIT on the
	// connection that made the write (on Cluster, the node that owns the
	// record). A completion sends it in the same round trip as its script;
	// a claim sends it after its script, and only when it took the record
	// (a replay or a conflict never waits). It narrows the window in which
	// a failover loses an acknowledged claim. A WAIT that returns fewer
	// replicas, or fails, is reported to OnWaitShort and does not fail the
	// call, unless WaitStrict refuses the claim.
	WaitReplicas int
	// WaitStrict makes a claim that fewer than WaitReplicas replicas
	// acknowledged unusable: Claim releases it and fails with
	// ErrReplicasShort, so nothing is forwarded on a claim a failover could
	// lose. Completions are not affected (the upstream has acted: the
	// shortfall is reported and the call succeeds), nor are replays, which
	// never wait.
	WaitStrict bool
	// WaitTimeout bounds each WAIT; default 100ms. It must be shorter than
	// OpTimeout, which bounds the whole round trip.
	WaitTimeout time.Duration
	// OnWaitShort, when set, is called (from the calling goroutine) for
	// every WAIT that returned fewer than WaitReplicas acknowledgements.
	OnWaitShort func(WaitShortfall)

	// AllowEviction lets Open use a Redis whose maxmemory-policy may evict
	// records (anything but noeviction): the operator accepts that an
	// evicted record lets a retry execute again. Without it such a Redis is
	// refused at Open and on every new connection, with an error naming the
	// policy. Under an allkeys-* policy, which may evict the deployment
	// secret too, Secret refuses: the secret must be configured.
	AllowEviction bool

	// OnAvailability, when set, is told when the store stops answering
	// and when it answers again (see Availability). It is called from the
	// goroutine of the call that saw the change.
	OnAvailability func(Availability)

	// OnEvictionCheck, when set, is called by Open once per Redis master
	// with the master's maxmemory-policy (see EvictionCheck.Evicts), or
	// with the error that kept Open from reading it (CONFIG disabled or
	// renamed, or not allowed to the user). The check never fails Open.
	OnEvictionCheck func(EvictionCheck)
}

// Store is a Redis record store. It is safe for concurrent use.
type Store struct {
	client    goredis.UniversalClient
	prefix    string
	opTimeout time.Duration
	clustered bool     // a Cluster: the state indexes are per tag
	batch     *batcher // sends the scripts of concurrent calls together

	// wait replicas (0: no WAIT) within waitTimeout after claims and
	// completions; shortfalls go to onWaitShort.
	wait        int
	waitStrict  bool
	waitTimeout time.Duration
	onWaitShort func(WaitShortfall)

	// clockOffset is the Redis clock minus the local clock in ms, learnt
	// from TIME at open and from claim replies; clockKnown says whether
	// one has been seen.
	clockOffset atomic.Int64
	clockKnown  atomic.Bool

	secret secretCache    // the deployment secret, once read (see Secret)
	addrs  []string       // the addresses dialled (see Where)
	where  string         // the store's address for messages, password redacted (see Where)
	evict  *evictionGuard // the eviction policy check
	health health         // reachability, for Options.OnAvailability

	notices redisNotices // the notice subscription, running while requests wait

	closeOnce sync.Once
	closeErr  error
	onClose   func() // extra clean-up (a test's miniredis)
}

// New wraps an existing client. prefix defaults to "idemgate:", opTimeout to
// 2s. The client should have ContextTimeoutEnabled set so that the per-call
// deadline also bounds socket reads (Open does this). Close closes the client.
func New(client goredis.UniversalClient, prefix string, opTimeout time.Duration) *Store {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if opTimeout <= 0 {
		opTimeout = store.DefaultOpTimeout
	}
	_, clustered := client.(*goredis.ClusterClient)
	s := &Store{client: client, prefix: prefix, opTimeout: opTimeout, clustered: clustered,
		batch: newBatcher(client, opTimeout), health: health{closed: make(chan struct{})}}
	s.notices.client, s.notices.channel, s.notices.linger = client, s.NoticeChannel(), noticeLinger
	return s
}

// universalOptions turns Options into go-redis options: per-call deadlines
// from the context, no PING per command, no connection-identity or
// maintenance-notification handshakes, quick failure when Redis is down.
func (o Options) universalOptions() *goredis.UniversalOptions {
	dial := o.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTime
	}
	op := o.OpTimeout
	if op <= 0 {
		op = store.DefaultOpTimeout
	}
	pool := o.PoolSize
	if pool <= 0 {
		pool = 10 * runtime.GOMAXPROCS(0)
	}
	return &goredis.UniversalOptions{
		Addrs:                 o.Addrs,
		MasterName:            o.MasterName,
		IsClusterMode:         o.Cluster,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		TLSConfig:             o.TLS,
		Dialer:                dialer(dial, o.TLS),
		PoolSize:              pool,
		DialTimeout:           dial,
		ReadTimeout:           op,
		WriteTimeout:          op,
		ContextTimeoutEnabled: true,
		// One dial attempt per try and few, short retries: a Redis that is
		// down must turn into an error quickly, not into a queue of waiting
		// requests. Retrying is safe: every script is idempotent per token.
		DialerRetries:   1,
		MaxRetries:      2,
		MaxRetryBackoff: 100 * time.Millisecond,
		DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// Open connects to Redis: Cluster when opts.Cluster, Sentinel failover when
// opts.MasterName is set, else a single node. It pings once (the error is
// returned and the client closed when that fails) and loads the scripts.
func Open(opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("store: no Redis address")
	}
	if len(opts.Addrs) > 1 && !opts.Cluster && opts.MasterName == "" {
		return nil, errors.New("store: several Redis addresses need cluster or master_name")
	}
	if err := opts.checkWait(); err != nil {
		return nil, err
	}
	guard := &evictionGuard{allow: opts.AllowEviction}
	uo := opts.universalOptions()
	uo.OnConnect = guard.onConnect
	client := goredis.NewUniversalClient(uo)
	s := New(client, opts.KeyPrefix, opts.OpTimeout)
	s.evict = guard
	s.addrs = opts.Addrs
	if opts.WaitReplicas > 0 {
		s.wait, s.waitTimeout, s.onWaitShort = opts.WaitReplicas, cmp.Or(opts.WaitTimeout, DefaultWaitTimeout), opts.OnWaitShort
		s.waitStrict = opts.WaitStrict
	}
	s.health.report = opts.OnAvailability
	if err := s.start(opts.DialTimeout); err != nil {
		_ = client.Close()
		return nil, err
	}
	var refused error
	s.checkEviction(opts, func(ec EvictionCheck) {
		if ec.Err == nil {
			guard.note(ec.Policy)
		}
		if ec.Evicts() && !opts.AllowEviction && refused == nil {
			refused = errEvicts(ec.Addr, ec.Policy)
		}
		if opts.OnEvictionCheck != nil {
			opts.OnEvictionCheck(ec)
		}
	})
	if refused != nil {
		_ = client.Close()
		return nil, refused
	}
	return s, nil
}

// start pings and preloads the scripts, so the first call of each is a
// single EVALSHA. It may take the dial timeout plus the op timeout.
func (s *Store) start(dial time.Duration) error {
	if dial <= 0 {
		dial = DefaultDialTime
	}
	ctx, cancel := context.WithTimeout(context.Background(), dial+s.opTimeout)
	defer cancel()
	if err := s.readClock(ctx); err != nil {
		return fmt.Errorf("store: ping Redis: %w", err)
	}
	if err := checkVersion(s.client.Info(ctx, "server").Val()); err != nil {
		return err
	}
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("store: load script: %w", err)
		}
	}
	return nil
}

// checkVersion refuses a Redis older than 7.0, whose SET cannot take NX
// and GET together, from its INFO server section. A server that does not
// say (INFO denied to the user, a proxy) is let through.
func checkVersion(info string) error {
	_, rest, ok := strings.Cut(info, "redis_version:")
	if !ok {
		return nil
	}
	version, _, _ := strings.Cut(rest, "\r\n")
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err == nil && n < 7 {
		return fmt.Errorf("store: Redis %s is too old: 7.0 or newer is required", version)
	}
	return nil
}

// Close closes the client.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.health.closed)
		s.notices.stop()
		s.closeErr = s.client.Close()
		if s.onClose != nil {
			s.onClose()
		}
	})
	return s.closeErr
}

// Client returns the underlying client.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Key returns the Redis key of record id: prefix + "{" + tag + "}" + id,
// where tag is the id's first three characters (see Shard).
func (s *Store) Key(id string) string { return s.prefix + "{" + Shard(id) + "}" + id }

// IndexKey returns the Redis key of a state index (st: in flight, unknown
// or released). On a Cluster every tag has its own, in the tag's slot:
// prefix + "{" + shard + "}:idx:" + state, shard a tag (see Shard). On a
// single node (and with Sentinel), where no slot separates keys, one index
// per state serves every record: prefix + "idx:" + state, whatever shard
// says. The index is a sorted set of record ids scored with each record's
// expiry time in ms; entries scored in the past are dead and are trimmed
// whenever a script moves a record into the index.
func (s *Store) IndexKey(shard string, st store.State) string {
	if !s.clustered {
		return s.prefix + "idx:" + store.StoredState(st)
	}
	return s.prefix + "{" + shard + "}:idx:" + store.StoredState(st)
}

// indexShards is how many indexes each state has: one per tag on a
// Cluster, else one.
func (s *Store) indexShards() int {
	if s.clustered {
		return numShards
	}
	return 1
}

// numShards is the number of hash tags: three hex digits.
const numShards = 4096

const hexDigits = "0123456789abcdef"

// Shard returns the hash tag of a record id, shared by the record and the
// state indexes that list it: its first three characters. Ids from
// keying.KeyID are lowercase hex; any other byte is folded onto a hex
// digit, and a shorter id is padded with "0".
func Shard(id string) string {
	if len(id) >= 3 && isHex(id[0]) && isHex(id[1]) && isHex(id[2]) {
		return id[:3]
	}
	var t [3]byte
	for i := range t {
		t[i] = '0'
		if i < len(id) {
			t[i] = hexDigits[id[i]&15]
			if isHex(id[i]) {
				t[i] = id[i]
			}
		}
	}
	return string(t[:])
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// shardOf is the number of a tag (0 to 4095).
func shardOf(tag string) int {
	n, _ := strconv.ParseUint(tag, 16, 16)
	return int(n)
}

// tagOf is the tag of shard number n.
func tagOf(n int) string {
	return string([]byte{hexDigits[n>>8&15], hexDigits[n>>4&15], hexDigits[n&15]})
}

const (
	idxInFlight = "idx:in_flight"
	idxUnknown  = "idx:unknown"
	idxReleased = "idx:released"
)

// keys returns the keys of a state-changing script: the record, its
// tag's three state indexes and its tombstone, in the order the scripts
// expect (KEYS[1] record, KEYS[2..4] in_flight, unknown, released, KEYS[5]
// tombstone: TombstoneKey), cut from one string.
func (s *Store) keys(id string) []string {
	base := s.prefix + "{" + Shard(id) + "}"
	ib := base + ":" // the indexes' prefix
	if !s.clustered {
		ib = s.prefix
	}
	all := base + id + ib + idxInFlight + ib + idxUnknown + ib + idxReleased + base + tombstoneInfix + id
	k := make([]string, 5)
	i := len(base) + len(id)
	k[0] = all[:i]
	for j, suffix := range [...]string{idxInFlight, idxUnknown, idxReleased} {
		n := len(ib) + len(suffix)
		k[j+1] = all[i : i+n]
		i += n
	}
	k[4] = all[i:]
	return k
}

// ms converts a duration to whole milliseconds as a script argument,
// rounding up so that a positive duration never becomes 0.
func ms(d time.Duration) string { return strconv.FormatInt(store.Millis(d), 10) }

// Claim runs the claim script on the record (see store.Engine.Claim for
// the rules).
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	args, err := store.ValidateClaim(req)
	if err != nil {
		return store.ClaimResult{}, err
	}
	began := time.Now()
	res, err := s.claim(ctx, req, args)
	s.observe(began, err)
	return res, err
}

func (s *Store) claim(ctx context.Context, req store.ClaimRequest, args store.ClaimArgs) (store.ClaimResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	var (
		v   []any
		now time.Time
	)
	// The record as the script will write it for a new key, but for its
	// times, which the script stamps with the Redis clock.
	stored := (&blob{state: stInFlight, attempts: 1, executions: 1, claim: claimPart(req)}).encode()
	// A refusal while this caller still waits means the store's idea of the
	// Redis clock was off (the Redis clock jumped); the reply corrected it,
	// and the refused script changed nothing, so one more try is safe.
	keys, twin, held, err := s.claimRetention(ctx, req, args)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("store: claim %s: %w", req.ID, err)
	}
	var short *WaitShortfall // the claim took the record, but too few replicas have it
	for try := 0; ; try++ {
		sent := time.Now()
		var err error
		v, short, err = s.runClaim(ctx, req.ID, keys,
			req.ID, req.Token, stored, s.notAfter(ctx), ms(args.HoldTTL), string(args.OnExpired), ms(args.Lease),
			strconv.FormatInt(req.MaxExecutions, 10), string(args.OnTombstone()), string(args.OnTwin), twin, held)
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("store: claim %s: %w", req.ID, err)
		}
		if len(v) < 2 {
			return store.ClaimResult{}, errShortReply
		}
		if redisMs, _ := v[1].(int64); redisMs == 0 {
			// The script answered from a completed or held record without
			// reading the clock: the store's estimate stands in for it.
			now = s.redisNow()
		} else {
			now = time.UnixMilli(redisMs)
			s.learnClock(sent, time.Now(), now)
		}
		if code, _ := v[0].(int64); code != codeLate {
			break
		}
		if try > 0 || ctx.Err() != nil {
			return store.ClaimResult{}, fmt.Errorf("store: claim %s: %w", req.ID, ErrLateClaim)
		}
	}
	if short != nil {
		return store.ClaimResult{}, s.refuseShort(req, *short)
	}
	code, _ := v[0].(int64)
	switch code {
	case codeCreated, codeRejected:
		res := store.ClaimResult{Now: now}
		if err := pastOf(&res, req.ID, v[2:]); err != nil {
			return store.ClaimResult{}, err
		}
		if code == codeCreated {
			created := store.NewRecord(req, now, args.Lease)
			res.Record, res.Claimed = &created, true
			res.Claim = store.NewClaim(s, req, created.StartedAt, req.TTL)
		}
		return res, nil
	}
	if len(v) != 4 && !(code == codeHeld && len(v) == 6) {
		return store.ClaimResult{}, errShortReply
	}
	raw, _ := v[2].(string)
	rec, _, err := decodeBlob(req.ID, raw, false)
	if err != nil {
		return store.ClaimResult{}, err
	}
	rec.Attempts, _ = v[3].(int64)
	res := store.ClaimResult{TakeOver: code == codeTakeOver, Record: rec, Now: now}
	if code == codeHeld {
		if err := pastOf(&res, req.ID, v[4:]); err != nil {
			return store.ClaimResult{}, err
		}
	}
	if code == codeTakeOver || code == codeOwned {
		res.Claimed, res.Claim = true, store.NewClaim(s, req, rec.StartedAt, req.TTL)
	}
	return res, nil
}

// claimPart is the claim part of the record a claim of a new key writes. A
// completion builds it again from the same claim, to the byte, and so
// tells an unchanged record from a changed one.
func claimPart(req store.ClaimRequest) [numClaimFields]string {
	var c [numClaimFields]string
	c[cToken], c[cRoute], c[cOperation] = req.Token, req.Route, req.Operation
	c[cFingerprint], c[cFingerprintRule] = req.Fingerprint, req.FingerprintRule
	if !req.Check.IsZero() {
		c[cCheck], c[cCheckAfter] = storedCheck(req.Check), ms(req.Check.After)
	}
	c[cRequest] = string(req.Request)
	c[cCall] = string(store.EncodeToolCall(req.Call))
	return c
}

// redisNow is the store's estimate of the Redis clock now.
func (s *Store) redisNow() time.Time {
	return time.Now().Add(time.Duration(s.clockOffset.Load()) * time.Millisecond)
}

// readClock learns the Redis clock with TIME.
func (s *Store) readClock(ctx context.Context) error {
	sent := time.Now()
	t, err := s.client.Time(ctx).Result()
	if err != nil {
		return err
	}
	s.learnClock(sent, time.Now(), t)
	return nil
}

// ErrLateClaim: a claim reached Redis only after its deadline had passed
// (Redis was stalled), so the script refused it and changed nothing.
var ErrLateClaim = errors.New("store: the claim reached Redis after its deadline and was refused")

// notAfter is the latest Redis time (ms) at which a claim may still take
// effect: its caller stops waiting at the context's deadline. A
// claim that runs later (its command sat in a stalled Redis's socket) would
// hold the key for a request that already answered "not forwarded". 0 (no
// limit) until a reply has taught the store the Redis clock.
func (s *Store) notAfter(ctx context.Context) int64 {
	deadline, ok := ctx.Deadline()
	if !ok || !s.clockKnown.Load() {
		return 0
	}
	return deadline.UnixMilli() + s.clockOffset.Load()
}

// learnClock records the Redis clock against the local one, taking the
// Redis time as of the middle of the round trip.
func (s *Store) learnClock(sent, received, redisNow time.Time) {
	mid := sent.Add(received.Sub(sent) / 2)
	s.clockOffset.Store(redisNow.UnixMilli() - mid.UnixMilli())
	s.clockKnown.Store(true)
}

// fenced runs a fenced script and maps its 1/0 reply. The script gets the
// record id as ARGV[1], then args; KEYS are the record and its shard's
// indexes (renew only needs the record).
func (s *Store) fenced(ctx context.Context, op string, sc *goredis.Script, id string, args ...any) (bool, error) {
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	keys := s.keys(id)
	if sc == renewScript {
		keys = keys[:1]
	}
	return s.fencedKeys(ctx, op, sc, id, keys, args...)
}

// fencedKeys runs a fenced script on keys.
func (s *Store) fencedKeys(ctx context.Context, op string, sc *goredis.Script, id string, keys []string, args ...any) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	n, err := s.run(ctx, op, id, sc, keys, append([]any{id}, args...)...).Int64()
	if err != nil {
		return false, fmt.Errorf("store: %s %s: %w", op, id, noRoom(err))
	}
	return n == 1, nil
}

// noRoom marks a write a Redis at its maxmemory refused (an OOM error,
// under noeviction) as a store.ErrNoRoom: nothing was written, and the
// write succeeds once Redis has memory again.
func noRoom(err error) error {
	if goredis.HasErrorPrefix(err, "OOM") {
		return fmt.Errorf("%w (%w)", err, store.ErrNoRoom)
	}
	return err
}

// Renew extends a live claim's lease to now+lease (Redis clock). It returns
// false when the record is no longer in flight with this token.
func (s *Store) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	lease = cmp.Or(lease, store.DefaultLease)
	if lease < 0 {
		return false, fmt.Errorf("%w: negative lease", store.ErrInvalidArgument)
	}
	return s.fenced(ctx, "renew", renewScript, id, token, ms(lease))
}

// Complete stores the result and marks the record completed (completed_at =
// now, key TTL = req.TTL, default 24h); see CompleteRequest for when it
// succeeds, and for a record that is gone.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	ttl := cmp.Or(req.TTL, store.DefaultTTL)
	if ttl < 0 {
		return false, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	res, c := req.Result, req.Claim
	if err := store.ValidateComplete(req); err != nil {
		return false, err
	}
	omitted := "0"
	if res.BodyOmitted {
		omitted = "1"
	}
	now := s.redisNow()
	result := [numResultFields]string{
		rCompletedAt: strconv.FormatInt(now.UnixMilli(), 10),
		rStatus:      strconv.Itoa(res.Status),
		rBodyOmitted: omitted,
		rDigest:      res.Digest,
		rExternalID:  res.ExternalID,
		rHeader:      store.EncodeHeader(res.Header),
	}
	sa := req.StartedAt.UnixMilli()
	claim := claimPart(c)
	claim[cRequest] = "" // a completed record keeps no request
	b := blob{
		state: stCompleted, attempts: 1, executions: 1,
		expires:   now.UnixMilli() + store.Millis(ttl),
		startedAt: sa, leaseUntil: sa + store.Millis(cmp.Or(c.Lease, store.DefaultLease)),
		claim:  claim,
		result: &result, body: res.Body,
	}
	return s.complete(ctx, req, b.encode(), ttl, now, result[rStatus])
}

// Release marks the record released (the attempt had no effect): the next
// Claim executes again. Attempts and executions are kept, result fields are
// dropped, key TTL = ttl (default 24h). False when the token was taken over.
func (s *Store) Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	ttl = cmp.Or(ttl, store.DefaultTTL)
	if ttl < 0 {
		return false, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	return s.fenced(ctx, "release", releaseScript, id, token, ms(ttl), s.NoticeChannel(), s.notices.flag())
}

// MarkUnknown holds the record as outcome_unknown with reason (e.g.
// "upstream_5xx", "upstream_timeout"; default "unknown"), key TTL = holdTTL
// (default 720h). False when the token was taken over or the record is
// already completed (a stored result is never demoted).
func (s *Store) MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error) {
	holdTTL = cmp.Or(holdTTL, store.DefaultHoldTTL)
	if holdTTL < 0 {
		return false, fmt.Errorf("%w: negative hold TTL", store.ErrInvalidArgument)
	}
	if reason == "" {
		reason = "unknown"
	}
	return s.fenced(ctx, "mark unknown", markUnknownScript, id, token, reason, ms(holdTTL), s.NoticeChannel(), s.notices.flag())
}

// Get reads a record (one GET); nil, nil when it does not exist.
func (s *Store) Get(ctx context.Context, id string) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	v, err := s.client.Get(ctx, s.Key(id)).Result()
	if err == goredis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s: %w", id, err)
	}
	rec, _, err := decodeBlob(id, v, false)
	return rec, err
}
