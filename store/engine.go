// Package store is the record-store contract and the rules every engine
// applies alike. The handler, the verifier and the operator service need of
// a store what Engine says; the engines live below this package and know
// nothing of them:
//
//   - store/embedded: a durable store in one gateway's directory, on
//     Pebble;
//   - store/redis: Redis (a node, Sentinel or Cluster), shared by every
//     gateway, the per-record rules in Lua scripts;
//   - store/postgres: PostgreSQL through pgx, shared by every gateway, the
//     claim and the completion one SQL statement each, the other changes
//     on the record's locked row.
//
// Every engine behaves identically; the conformance suite store/storetest
// runs against all three and is the definition of "identically".
//
// A record's life is a handful of transitions, each in a file of its own,
// read top to bottom: claim.go (and the handle a claim gives,
// claimhandle.go), complete.go, release.go, hold.go (held as outcome
// unknown), notdone.go (an execution that ended "not done"),
// verification.go (a check's lease and verdict; the lookup it runs in
// check.go), operator.go (an operator's release and completion) and
// redrive.go. Each validates its arguments as every engine must and, for
// the engines that run the rules in Go (embedded and Postgres), computes
// the next record as a pure function of the record (Stored, stored.go),
// the store's clock and the request. What they share: record.go (what a
// record says), arguments.go (ids, tokens, durations), errors.go (the
// errors callers tell apart with errors.Is), retention.go (the tombstones
// and twin entries that outlive a record).
package store

import (
	"context"
	"time"
)

// Engine is the record-store contract: what the handler, the verifier and
// the operator service need from a store, whatever keeps the records
// (package store/embedded, store/redis or store/postgres). Every engine
// behaves identically; the conformance suite (package store/storetest) is
// the definition of "identically". Times are the
// store's clock, which every gateway sharing the store agrees on.
//
// Fencing: Renew, Complete, Release and MarkUnknown succeed only while the
// record carries the caller's token; false (not an error) means someone
// else owns the record now.
type Engine interface {
	// Claim takes the right to execute an operation, or returns its record:
	//
	//   - absent: create it in flight (attempts=1, executions=1, lease from now,
	//     record lifetime = HoldTTL); Claimed. Unless (see ClaimRequest):
	//     a live tombstone of the id under AfterExpiryReject, or a live twin
	//     entry naming another record under TwinReject: nothing is created
	//     (Record nil); not claimed. A live twin entry naming another record
	//     under TwinHold: created held as outcome_unknown with
	//     ReasonSamePayload (HeldSamePayload, lifetime HoldTTL); not claimed.
	//     Whatever it does, the result reports the tombstone and the twin
	//     it found.
	//   - in flight with req.Token (a retried Claim): Claimed, nothing changes.
	//   - otherwise attempts+1, and then:
	//   - in flight, lease run out, OnExpired hold: becomes outcome_unknown with
	//     reason lease_expired, record lifetime = HoldTTL; not claimed.
	//   - released, or in flight with the lease run out under OnExpired
	//     release, AND the same Fingerprint and FingerprintRule; or released
	//     as refused by the upstream (Free), whatever the payload: taken over with
	//     req.Token (executions+1, new lease, result fields cleared, the
	//     claim's fingerprint and rule); Claimed and TakeOver. A lease run out counts first as an unknown
	//     outcome let go (NotDone+1, Unknowns+1); when that makes
	//     req.MaxExecutions, the record is held with ReasonRetriesExhausted
	//     (record lifetime = HoldTTL) instead; not claimed.
	//   - anything else (live claim, completed, unknown, different
	//     fingerprint): returned as it is; not claimed.
	//
	// A different fingerprint never takes over a record that may have
	// taken effect. When the record's
	// FingerprintRule differs from the caller's current rule, recompute the
	// fingerprint under the record's rule and, if it matches, Claim again with
	// that fingerprint and rule.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Renew extends a live claim's lease.
	Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error)
	// Complete stores a result under a claim (see CompleteRequest).
	Complete(ctx context.Context, req CompleteRequest) (bool, error)
	// Release marks the attempt as having had no effect.
	Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error)
	// MarkUnknown holds the record as outcome unknown.
	MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error)

	// Get reads one record; nil, nil when it does not exist.
	Get(ctx context.Context, id string) (*Record, error)
	// List pages through records by state from the state indexes.
	List(ctx context.Context, f ListFilter) (ListPage, error)
	// OperatorRelease and OperatorComplete resolve a record on an
	// operator's word, atomically against claims, under a new token, and
	// append act to the record's audit trail in the same step.
	// OperatorComplete also leaves a tombstone of DefaultTombstone;
	// OperatorRelease removes the record's tombstone, if any (the
	// operator says the operation did not take effect).
	OperatorRelease(ctx context.Context, id string, act Action, ttl time.Duration) (*Record, error)
	OperatorComplete(ctx context.Context, id string, res Result, act Action, ttl time.Duration) (*Record, error)

	// BeginCheck takes the check lease of record id for lease (the store's
	// clock): the right to run one check and end it with EndCheck under
	// checkToken. It succeeds only while the record is outcome_unknown under
	// claimToken and no other check holds a live lease; with due, also only
	// once the next scheduled check's time has come (scheduled checks ask so;
	// a retry's and an operator's check do not). A BeginCheck retried with the
	// same checkToken while its lease lives succeeds again. It returns the
	// record as the call left it (nil when it does not exist) and whether
	// the lease is the caller's.
	BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*Record, bool, error)
	// EndCheck records a check under its lease and applies its verdict in the
	// same atomic step, while the record is still outcome_unknown under the
	// claim token and the check token is the lease's (else it changes nothing
	// and returns false with the current record):
	//
	//   - applied: completed with o.Result (CompletedAt now, Reason
	//     "verified", the check token as the record's token, so the held
	//     claim's late finisher can no longer overwrite it), lifetime o.TTL,
	//     and a tombstone outliving it by o.Tombstone (0: none);
	//   - not applied: the streak of counted "not applied" answers grows by
	//     one, when it is the first or comes at least o.Every after the last
	//     counted one; once it reaches o.NotFoundChecks the record is
	//     released (Reason "verified_not_applied", the check token as its
	//     token, lifetime o.TTL) and the next claim executes;
	//   - anything else, or a streak still short: the record stays held, the
	//     streak kept, the next check due o.Next from now (none when 0).
	//
	// The entry is kept (the last MaxCheckEntries), CheckCount grows, the
	// lease ends, and an operator's check is added to the audit trail. The
	// record is returned as the call left it.
	EndCheck(ctx context.Context, o CheckOutcome) (*Record, bool, error)

	// NotDone records a "not done" execution under its claim: released,
	// or held with ReasonRetriesExhausted once the budget is used up.
	NotDone(ctx context.Context, req NotDoneRequest) (NotDoneOutcome, error)
	// Redrive claims a released or retries-exhausted record for an
	// operator's re-drive under a new token (see RedriveRefusal).
	Redrive(ctx context.Context, req RedriveRequest) (*Record, error)

	// Secret returns the deployment secret kept in the store, creating a
	// random one atomically the first time, so every gateway that shares
	// the store derives the same record ids.
	Secret(ctx context.Context) ([]byte, error)
	// KeptSecret returns the deployment secret kept in the store, without
	// creating one: nil when the store keeps none (yet).
	KeptSecret(ctx context.Context) ([]byte, error)
	// KeepSecretCheck keeps check, the check value of the deployment
	// secret the gateway derives record ids under (keying.SecretCheck),
	// when the store keeps none yet, atomically: the first gateway's
	// wins. It returns the check value the store keeps, which the caller
	// compares with its own.
	KeepSecretCheck(ctx context.Context, check []byte) (SecretCheck, error)
	// Where names the store in messages: the Redis address (password
	// redacted) and key prefix, the Postgres URL (password redacted) and
	// schema, or the embedded store's directory.
	Where() string

	// Close releases the engine's resources.
	Close() error
}
