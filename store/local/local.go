// Package local is the durable embedded record store: a native Go engine
// behind the store.Engine contract for a single gateway, keeping its
// records in one directory (DIR).
//
// Exclusive: one process owns DIR, through an flock on DIR/LOCK (the
// kernel drops it when the process dies, so a kill -9 leaves no stale
// lock); DIR/LOCK holds the owner's pid, which a second Open names in its
// error.
//
// Durable: every record lives in memory and every change to it is
// appended to a journal (DIR/journal-N.log). A change that the caller
// acts on (a claim that lets a request through, a stored result, a
// release, a hold, an operator's resolution) returns only once its journal
// entry is fsync'd; concurrent callers share one fsync (group commit).
// Changes nobody acts on (a replay's attempt count, a renewed lease) ride
// along with the next fsync, at most 200ms later. A call that returns a
// record waits until that record's last acknowledged change is on disk,
// so nothing a client was told is ever lost in a crash: what a crash can
// lose is an attempt count or a lease renewal of the last 200ms (a lost
// renewal only makes the dead process's lease run out sooner).
//
// Bounded: records expire like Redis keys (their TTL, hold TTL while in
// flight or held); when the journal and the last snapshot together hold
// more than twice the live data plus CompactMin, the engine starts a new
// journal and writes a snapshot of the live records
// (DIR/snapshot-N.dat, written aside and renamed), then deletes what the
// snapshot covers. Open loads the newest snapshot and replays the journals
// after it; a torn last entry (a crash mid-write) is dropped.
//
// Fast: a claim is a map lookup under one mutex plus, when it creates or
// takes over a record, a share of an fsync; a replay touches no disk
// before it answers. No sockets, no scripts.
package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

	"github.com/idemgate/idemgate/store"
)

// Defaults.
const (
	// DefaultCompactMin is the journal growth beyond twice the live data
	// tolerated before a compaction.
	DefaultCompactMin = 1 << 20
	// DefaultOpTimeout bounds the wait for an fsync.
	DefaultOpTimeout = 2 * time.Second
	// asyncFlush is how long a change nobody waits for may stay unwritten.
	asyncFlush = 200 * time.Millisecond
	// sweepEvery is how often expired records are dropped from memory
	// (reads treat them as gone from the millisecond they expire), so
	// that memory and the compaction's idea of the live data follow the
	// live set closely.
	sweepEvery = 100 * time.Millisecond
)

// Options configure Open.
type Options struct {
	// Dir is the directory the engine owns; it is created (0700) when
	// missing.
	Dir string
	// CompactMin is how many bytes the journal may grow beyond twice the
	// live data before a compaction; default DefaultCompactMin.
	CompactMin int64
	// OpTimeout bounds how long a call waits for its fsync; default 2s.
	OpTimeout time.Duration
	// OnError, when set, is told of failures no call returns: a journal
	// write that failed (the store stops: every later call fails) and a
	// compaction that failed (retried a minute later; nothing is lost).
	// It is called from the engine's own goroutines.
	OnError func(error)
}

// Recovery is what Open found in DIR.
type Recovery struct {
	Records      int   // live records loaded
	Expired      int   // records dropped because they had expired
	JournalBytes int64 // journal bytes replayed
	// TornBytes are the bytes of a damaged journal tail dropped (a crash
	// mid-write leaves one partial entry, which was never acknowledged).
	TornBytes int64
	Took      time.Duration
}

// Engine is an open embedded store. It is safe for concurrent use.
type Engine struct {
	dir  string
	lock *dirLock
	opts Options

	mu        sync.Mutex
	slots     map[string]*slot
	index     *btree.BTreeG[listKey]
	expiry    expiryHeap
	liveBytes int64
	failed    error // sticky: a journal write failed, or Close ran

	// Journal state under mu: bytes appended since the last commit and
	// the round that will commit them.
	buf   []byte
	round *round

	// File state under mu (written by the committer).
	gen           uint64 // the current journal's generation
	journalBytes  int64
	snapshotBytes int64
	snapshotting  bool
	compactAfter  time.Time // no compaction before (after a failed one)

	jf    *os.File // the current journal; the committer's alone
	spare []byte   // the committer's spare buffer

	clock atomic.Int64 // last time handed out, ms: never goes back

	kick   chan struct{}
	stop   chan struct{}
	done   sync.WaitGroup // committer and sweeper
	snapWG sync.WaitGroup

	secretMu sync.Mutex
	secret   []byte

	recovered Recovery
	closeOnce sync.Once
	closeErr  error
}

var _ store.Engine = (*Engine)(nil)

// errClosed is returned by every call after Close.
var errClosed = errors.New("store: embedded store is closed")

// slot is one record id's place: the current record (immutable once
// published; changes replace it) and its position in the expiry heap.
type slot struct {
	cur     *rec
	heapIdx int
}

// rec is a record as kept: the contract's Record (Header and Body are
// never changed after they are stored) plus its expiry.
type rec struct {
	store.Record
	expireAt int64  // ms; the record is gone from then on
	size     int64  // bytes of its journal entry
	round    *round // commit round of its last acknowledged change; nil: on disk

	// checkToken is the running check's token (the check lease until
	// CheckLeaseUntil); notFoundAt is when the last counted "not
	// applied" answer came (ms, 0: none).
	checkToken string
	notFoundAt int64
}

func (r *rec) clone() *rec {
	c := *r
	return &c
}

// clearResult drops the result fields, as a release or a takeover does.
func (r *rec) clearResult() {
	r.CompletedAt = time.Time{}
	r.Status = 0
	r.Header = nil
	r.Body = nil
	r.BodyOmitted = false
	r.Digest = ""
	r.ExternalID = ""
	r.Reason = ""
}

// setResult stores res (already normalised by newResult).
func (r *rec) setResult(res store.Result) {
	r.Status = res.Status
	r.Header = res.Header
	r.Body = res.Body
	r.BodyOmitted = res.BodyOmitted
	r.Digest = res.Digest
	r.ExternalID = res.ExternalID
}

// view is a copy of the record for a caller, who may change it.
func (r *rec) view() *store.Record {
	v := r.Record
	if r.Header != nil {
		v.Header = r.Header.Clone()
	}
	if r.Body != nil {
		v.Body = slices.Clone(r.Body)
	}
	v.Audit = slices.Clone(r.Audit)
	v.Checks = slices.Clone(r.Checks)
	v.Check.Match = slices.Clone(r.Check.Match)
	return &v
}

// newResult copies a result out of the caller's buffers, with its header
// in the stored form every engine keeps.
func newResult(res store.Result) store.Result {
	res.Header = store.DecodeHeader(store.EncodeHeader(res.Header))
	if len(res.Body) == 0 {
		res.Body = nil
	} else {
		res.Body = slices.Clone(res.Body)
	}
	return res
}

// Open opens (creating when missing) and recovers the store in
// opts.Dir, and takes it for this process: it fails, naming DIR and the
// owner's pid, when another process has it.
func Open(opts Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("store: embedded store: no directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	if opts.CompactMin <= 0 {
		opts.CompactMin = DefaultCompactMin
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		dir:   dir,
		lock:  lock,
		opts:  opts,
		slots: map[string]*slot{},
		index: btree.NewG(32, listLess),
		round: newRound(),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	if err := e.recover(); err != nil {
		_ = lock.unlock()
		return nil, err
	}
	e.done.Add(2)
	go e.commitLoop()
	go e.sweepLoop()
	return e, nil
}

// Dir is the directory the engine owns.
func (e *Engine) Dir() string { return e.dir }

// Recovered says what Open found in DIR.
func (e *Engine) Recovered() Recovery { return e.recovered }

// Close writes what is pending, stops the engine and gives DIR up.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		if e.failed == nil {
			e.failed = errClosed
		}
		e.mu.Unlock()
		close(e.stop)
		e.done.Wait() // the committer wrote and synced what was pending
		e.snapWG.Wait()
		if e.jf != nil {
			e.closeErr = e.jf.Close()
		}
		if err := e.lock.unlock(); e.closeErr == nil {
			e.closeErr = err
		}
	})
	return e.closeErr
}

// now is the engine's clock in ms: the wall clock, never going back.
func (e *Engine) now() int64 {
	for {
		last := e.clock.Load()
		n := time.Now().UnixMilli()
		if n <= last {
			return last
		}
		if e.clock.CompareAndSwap(last, n) {
			return n
		}
	}
}

// Now is the engine's clock, by which leases and TTLs run out.
func (e *Engine) Now() time.Time { return time.UnixMilli(e.now()) }

// ExpiresAt is when record id expires; the zero time when there is no
// such record.
func (e *Engine) ExpiresAt(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.live(id, e.now()); s != nil {
		return time.UnixMilli(s.cur.expireAt)
	}
	return time.Time{}
}

// live returns id's slot, or nil when it has none or its record expired
// (which is then dropped). Called with mu held.
func (e *Engine) live(id string, now int64) *slot {
	s := e.slots[id]
	if s != nil && s.cur.expireAt <= now {
		e.drop(s)
		return nil
	}
	return s
}

// usable is nil, or why no call can run. Called with mu held.
func (e *Engine) usable() error {
	if e.failed == nil {
		return nil
	}
	if e.failed == errClosed {
		return errClosed
	}
	return fmt.Errorf("store: embedded store %s: %w", e.dir, e.failed)
}

// Claim takes the right to execute an operation, or returns its record
// (see store.Store.Claim for the rules, which are the same).
func (e *Engine) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	a, err := store.CheckClaim(req)
	if err != nil {
		return store.ClaimResult{}, err
	}
	lease, hold := store.Millis(a.Lease), store.Millis(a.HoldTTL)
	e.mu.Lock()
	if err := e.usable(); err != nil {
		e.mu.Unlock()
		return store.ClaimResult{}, err
	}
	now := e.now()
	res := store.ClaimResult{Now: time.UnixMilli(now)}
	var out *rec
	s := e.live(req.ID, now)
	switch {
	case s == nil:
		out = &rec{Record: store.Record{
			ID:              req.ID,
			Route:           req.Route,
			Operation:       req.Operation,
			Fingerprint:     req.Fingerprint,
			FingerprintRule: req.FingerprintRule,
			State:           store.StateInFlight,
			Token:           req.Token,
			StartedAt:       time.UnixMilli(now),
			LeaseUntil:      time.UnixMilli(now + lease),
			Attempts:        1,
			Executions:      1,
			Check:           normalCheck(req.Check),
		}, expireAt: now + hold}
		e.put(nil, out)
		res.Claimed = true
	case s.cur.State == store.StateInFlight && s.cur.Token == req.Token:
		out = s.cur // a retried claim: already the caller's
		res.Claimed = true
	default:
		cur := s.cur
		out = cur.clone()
		out.Attempts++
		expired := cur.State == store.StateInFlight && msOf(cur.LeaseUntil) <= now
		same := cur.Fingerprint == req.Fingerprint && cur.FingerprintRule == req.FingerprintRule
		switch {
		case expired && a.OnExpired != store.ExpiredRelease:
			out.State, out.Reason, out.expireAt = store.StateUnknown, "lease_expired", now+hold
			out.scheduleFirstCheck(now)
			e.put(s, out)
		case same && (expired || cur.State == store.StateReleased):
			out.clearResult()
			out.State, out.Token, out.Route = store.StateInFlight, req.Token, req.Route
			out.StartedAt, out.LeaseUntil = time.UnixMilli(now), time.UnixMilli(now+lease)
			out.Executions++
			out.expireAt = now + hold
			out.newClaimChecks(normalCheck(req.Check))
			e.put(s, out)
			res.Claimed, res.TakeOver = true, true
		default:
			e.note(s, out, opAttempt, out.Attempts)
		}
	}
	e.mu.Unlock()
	// out is immutable once published: copy it without the lock.
	if err := e.wait(ctx, out.round); err != nil {
		return store.ClaimResult{}, fmt.Errorf("store: claim %s: %w", req.ID, err)
	}
	res.Record = out.view()
	if res.Claimed {
		res.Claim = store.Hold(e, req, res.Record.StartedAt, req.TTL)
	}
	return res, nil
}

// Renew extends a live claim's lease to now+lease.
func (e *Engine) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	lease = store.OrDefault(lease, store.DefaultLease)
	if lease < 0 {
		return false, errors.New("store: negative lease")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return false, err
	}
	now := e.now()
	s := e.live(id, now)
	if s == nil || s.cur.State != store.StateInFlight || s.cur.Token != token {
		return false, nil
	}
	r := s.cur.clone()
	r.LeaseUntil = time.UnixMilli(now + store.Millis(lease))
	e.note(s, r, opRenew, msOf(r.LeaseUntil))
	return true, nil
}

// Complete stores a result under its claim (see store.CompleteRequest),
// also writing the record anew when it does not exist.
func (e *Engine) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	id, token := req.Claim.ID, req.Claim.Token
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	ttl := store.OrDefault(req.TTL, store.DefaultTTL)
	if ttl < 0 {
		return false, errors.New("store: negative TTL")
	}
	result := newResult(req.Result)
	return e.change(ctx, "complete", id, func(s *slot, now int64) *rec {
		var r *rec
		switch {
		case s == nil:
			started := req.StartedAt
			if started.IsZero() {
				started = time.UnixMilli(now)
			}
			r = &rec{Record: store.Record{
				ID:              id,
				Route:           req.Claim.Route,
				Operation:       req.Claim.Operation,
				Fingerprint:     req.Claim.Fingerprint,
				FingerprintRule: req.Claim.FingerprintRule,
				Token:           token,
				StartedAt:       time.UnixMilli(started.UnixMilli()),
				Attempts:        1,
				Executions:      1,
			}}
		case s.cur.Token != token:
			return nil
		default:
			r = s.cur.clone()
		}
		r.State, r.Reason = store.StateCompleted, ""
		r.CompletedAt = time.UnixMilli(now)
		r.setResult(result)
		r.expireAt = now + store.Millis(ttl)
		return r
	})
}

// Release marks the record released: the next claim executes again.
func (e *Engine) Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	ttl = store.OrDefault(ttl, store.DefaultTTL)
	if ttl < 0 {
		return false, errors.New("store: negative TTL")
	}
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	return e.change(ctx, "release", id, func(s *slot, now int64) *rec {
		if s == nil || s.cur.Token != token {
			return nil
		}
		r := s.cur.clone()
		r.clearResult()
		r.State = store.StateReleased
		r.expireAt = now + store.Millis(ttl)
		return r
	})
}

// MarkUnknown holds the record as outcome unknown; a completed record is
// never demoted.
func (e *Engine) MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error) {
	holdTTL = store.OrDefault(holdTTL, store.DefaultHoldTTL)
	if holdTTL < 0 {
		return false, errors.New("store: negative hold TTL")
	}
	if reason == "" {
		reason = "unknown"
	}
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	return e.change(ctx, "mark unknown", id, func(s *slot, now int64) *rec {
		if s == nil || s.cur.Token != token || s.cur.State == store.StateCompleted {
			return nil
		}
		r := s.cur.clone()
		r.State, r.Reason = store.StateUnknown, reason
		r.expireAt = now + store.Millis(holdTTL)
		r.scheduleFirstCheck(now)
		return r
	})
}

// change runs one fenced state change: f returns the new record, or nil
// to leave it alone (false). It returns once the change is on disk.
func (e *Engine) change(ctx context.Context, op, id string, f func(s *slot, now int64) *rec) (bool, error) {
	e.mu.Lock()
	if err := e.usable(); err != nil {
		e.mu.Unlock()
		return false, err
	}
	now := e.now()
	s := e.live(id, now)
	r := f(s, now)
	if r == nil {
		e.mu.Unlock()
		return false, nil
	}
	e.put(s, r)
	rd := r.round
	e.mu.Unlock()
	if err := e.wait(ctx, rd); err != nil {
		return false, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return true, nil
}

// Get reads one record; nil, nil when it does not exist.
func (e *Engine) Get(ctx context.Context, id string) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	e.mu.Lock()
	if err := e.usable(); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	s := e.live(id, e.now())
	if s == nil {
		e.mu.Unlock()
		return nil, nil
	}
	cur := s.cur
	e.mu.Unlock()
	if err := e.wait(ctx, cur.round); err != nil {
		return nil, fmt.Errorf("store: get %s: %w", id, err)
	}
	return cur.view(), nil
}

// OperatorRelease releases a record on an operator's word (see
// store.Store.OperatorRelease) and appends act to its audit trail.
func (e *Engine) OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl = store.OrDefault(ttl, store.DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	return e.operator(ctx, "release", id, act, func(cur *rec, now int64) (*rec, error) {
		if cur.State == store.StateInFlight && msOf(cur.LeaseUntil) > now || cur.checking(now) {
			return nil, conflict(cur)
		}
		r := cur.clone()
		r.clearResult()
		r.State, r.Token, r.Reason = store.StateReleased, store.NewToken(), "operator"
		r.expireAt = now + store.Millis(ttl)
		return r, nil
	})
}

// OperatorComplete records a verified outcome on an operator's word (see
// store.Store.OperatorComplete) and appends act to its audit trail.
func (e *Engine) OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl = store.OrDefault(ttl, store.DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	if err := store.CheckOperatorResult(res); err != nil {
		return nil, err
	}
	if res.Digest == "" && !res.BodyOmitted {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	result := newResult(res)
	return e.operator(ctx, "complete", id, act, func(cur *rec, now int64) (*rec, error) {
		if cur.State == store.StateCompleted || cur.State == store.StateInFlight && msOf(cur.LeaseUntil) > now || cur.checking(now) {
			return nil, conflict(cur)
		}
		r := cur.clone()
		r.State, r.Token, r.Reason = store.StateCompleted, store.NewToken(), "operator"
		r.CompletedAt = time.UnixMilli(now)
		r.setResult(result)
		r.expireAt = now + store.Millis(ttl)
		return r, nil
	})
}

// operator runs an operator's change on an existing record: f returns the
// new record or the conflict; the audit entry is added in the same step.
func (e *Engine) operator(ctx context.Context, action, id string, act store.Action, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	if err := act.Validate(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if err := e.usable(); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	now := e.now()
	s := e.live(id, now)
	if s == nil {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	r, err := f(s.cur, now)
	if err != nil {
		v, rd := s.cur.view(), s.cur.round
		e.mu.Unlock()
		if werr := e.wait(ctx, rd); werr != nil {
			return nil, fmt.Errorf("store: operator %s %s: %w", action, id, werr)
		}
		return v, err
	}
	r.Audit = append(slices.Clip(r.Audit), store.AuditEntry{
		At: time.UnixMilli(now), Actor: act.Actor, Action: action, Reason: act.Reason,
	})
	if n := len(r.Audit) - store.MaxAuditEntries; n > 0 {
		r.Audit = r.Audit[n:] // the newest are kept, as on Redis
	}
	e.put(s, r)
	v, rd := r.view(), r.round
	e.mu.Unlock()
	if err := e.wait(ctx, rd); err != nil {
		return nil, fmt.Errorf("store: operator %s %s: %w", action, id, err)
	}
	return v, nil
}

// checking reports whether a verification check holds the record (a live
// check lease): operators wait for its verdict.
func (r *rec) checking(now int64) bool {
	return r.State == store.StateUnknown && msOf(r.CheckLeaseUntil) > now
}

func conflict(cur *rec) error { return store.ConflictOf(&cur.Record) }

// secretFile holds the deployment secret.
const secretFile = "secret"

// secretSize is the secret's length in bytes.
const secretSize = 32

// Secret returns the deployment secret kept in DIR/secret, creating a
// random one (written aside, fsync'd and renamed) the first time.
func (e *Engine) Secret(ctx context.Context) ([]byte, error) {
	e.secretMu.Lock()
	defer e.secretMu.Unlock()
	if e.secret != nil {
		return slices.Clone(e.secret), nil
	}
	path := filepath.Join(e.dir, secretFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(b) != secretSize {
			return nil, fmt.Errorf("store: embedded store: %s has %d bytes, want %d: restore it from a backup", path, len(b), secretSize)
		}
		e.secret = b
		return slices.Clone(b), nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("store: embedded store: %w", err)
	}
	b = make([]byte, secretSize)
	_, _ = rand.Read(b)
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("store: embedded store: create the secret: %w", err)
	}
	e.secret = b
	return slices.Clone(b), nil
}
