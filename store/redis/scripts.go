package redis

import (
	"context"
	"embed"
	"errors"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// Claim outcome codes, the first element of the claim script's reply.
const (
	codeExisting = 0 // not claimed: the record belongs to someone else (or is done)
	codeCreated  = 1 // claimed a new record
	codeTakeOver = 2 // claimed a released record or one whose lease ran out
	codeOwned    = 3 // already held with this token (a retried Claim)
	codeLate     = 4 // the claim reached Redis after its caller gave up: refused, nothing changed
	codeRejected = 5 // no record, and a tombstone or a twin refused the claim: nothing created
	codeHeld     = 6 // no record, and a twin held the new one (store.TwinHold): not claimed
)

// Operator script codes, the first element of their replies.
const (
	codeDone     = 1 // the record was resolved
	codeNotFound = 2 // no such record
	codeConflict = 3 // the record's state does not allow the operation
)

// The Lua scripts live in scripts/*.lua. A script is its files joined in
// order: the preludes (now.lua: the Redis clock, read first; now_lazy.lua:
// the clock read when first needed; record.lua: the record's stored form,
// its state indexes and settle; audit.lua: the operator audit trail) and
// its own file. $name placeholders in the files stand for the Go constants
// below, so the scripts and the code that reads their replies share one
// definition.
//
//go:embed scripts/*.lua
var luaFiles embed.FS

// luaConstants replaces the $name placeholders of the script files.
// Longer names come first where one is a prefix of another.
var luaConstants = strings.NewReplacer(
	"$codeExisting", strconv.Itoa(codeExisting),
	"$codeCreated", strconv.Itoa(codeCreated),
	"$codeTakeOver", strconv.Itoa(codeTakeOver),
	"$codeOwned", strconv.Itoa(codeOwned),
	"$codeLate", strconv.Itoa(codeLate),
	"$codeRejected", strconv.Itoa(codeRejected),
	"$codeHeld", strconv.Itoa(codeHeld),
	"$codeDone", strconv.Itoa(codeDone),
	"$codeNotFound", strconv.Itoa(codeNotFound),
	"$codeConflict", strconv.Itoa(codeConflict),
	"$codeCheckRefused", strconv.Itoa(codeCheckRefused),
	"$codeCheckHeld", strconv.Itoa(codeCheckHeld),
	"$codeCheckApplied", strconv.Itoa(codeCheckApplied),
	"$codeCheckReleased", strconv.Itoa(codeCheckReleased),
	"$MaxAuditEntries", strconv.Itoa(store.MaxAuditEntries),
	"$MaxCheckEntries", strconv.Itoa(store.MaxCheckEntries),
	"$MaxAnswers", strconv.Itoa(store.MaxAnswers),
	"$ReasonRetriesExhausted", store.ReasonRetriesExhausted,
	"$ReasonUnknownReleased", store.ReasonUnknownReleased,
	"$ReasonNotDone", store.ReasonNotDone,
	"$ReasonRefused", store.ReasonRefused,
	"$ReasonOperator", store.ReasonOperator,
	"$ReasonVerifiedNotApplied", store.ReasonVerifiedNotApplied,
	"$ReasonVerified", store.ReasonVerified,
	"$claimFields", "'"+strings.Join(claimFields[:], "', '")+"'",
	"$resultFields", "'"+strings.Join(resultFields[:], "', '")+"'",
)

// script assembles one script from its files.
func script(files ...string) *goredis.Script {
	var b strings.Builder
	for _, f := range files {
		src, err := luaFiles.ReadFile("scripts/" + f + ".lua")
		if err != nil {
			panic("store: " + err.Error()) // embedded: cannot happen in a built binary
		}
		b.Write(src)
	}
	return goredis.NewScript(luaConstants.Replace(b.String()))
}

// complete, release, mark unknown and not done publish the record id on
// the notice channel when they act and somebody may wait for the record
// (notice.lua; see Store.Notices): their last two ARGV are the channel
// and the notice flag (redisNotices.flag).
//
// Every script but renew and begin check gets KEYS = the record, its
// tag's three state indexes (in flight, unknown, released) and the
// record's tombstone (Store.keys),
// and ARGV[1] = the record id. Fenced scripts reply 1 when they acted, else
// 0; the others reply {code, now ms, record} with the record in its stored
// form (false when there is none).

// claimScript: ARGV 2 token, 3 the new record in flight as the caller
// built it (the script stamps its times), 4 not after (Redis clock ms; 0:
// no limit), 5 hold ttl ms, 6 on expired ("hold" | "release"), 7 lease ms,
// 8 the retry budget (0 or absent: none).
// Reply: {created code, now ms}; {late code, now ms} when the claim ran
// after ARGV[4]: its caller has given up on it, and a claim nobody waits
// for would hold the key until its lease ran out; else {code, now ms or 0
// (the clock was not read), record, attempts}, with the attempts the
// record has now (the record itself may be as it was before this attempt
// was counted).
//
// KEYS[5] is the record's tombstone, KEYS[6] (single node, detector on)
// the twin entry of ARGV 11's digest. ARGV 9 after expiry ("execute" |
// "reject"; "": look for no tombstone), 10 on twin ("warn" | "hold" | "reject"), 11 the twin entry
// as the caller read it (a Cluster, where it lives in another slot: ""
// for none), 12 the record held for the same payload as the caller built
// it ("" unless on twin is hold). A claim that finds no record replies
// {created code, now, tombstone, twin}, {rejected code, now, tombstone,
// twin} or {held code, now, record, 1, tombstone, twin} ("": none).
var claimScript = script("now_lazy", "record", "claim")

// renewScript: KEYS = the record. ARGV 2 token, 3 lease ms. The key's
// lifetime and index entry stay.
var renewScript = script("now", "record", "renew")

// completeScript: ARGV 2 token, 3 the completed record as the caller built
// it from its claim, 4 ttl ms, 5 tombstone ms past the record (0: none),
// 6 the tombstone, 7 the twin entry and 8 its lifetime ms (KEYS[6], the
// twin entry's key: single node only), 9 the notice channel, 10 the notice
// flag (last, as notice.lua wants them). A record that is gone
// (a failover lost the claim) is written anew from ARGV[3], with one
// attempt and one execution.
// It never reads the clock; now_lazy only declares the now that record.lua's
// settle refers to.
var completeScript = script("now_lazy", "record", "notice", "complete")

// releaseScript: ARGV 2 token, 3 ttl ms, 4 the notice channel, 5 the
// notice flag.
var releaseScript = script("now", "record", "notice", "release")

// markUnknownScript: ARGV 2 token, 3 reason, 4 hold ttl ms, 5 the notice
// channel, 6 the notice flag. A completed record is never demoted. A record that carries a
// check is due for its first scheduled check its after ms from now.
var markUnknownScript = script("now", "record", "notice", "mark_unknown")

// operatorReleaseScript: ARGV 2 new token, 3 ttl ms, 4 audit entry.
// Any state but a live in-flight claim becomes released under a new token;
// its tombstone (KEYS[5]) is deleted.
var operatorReleaseScript = script("now", "record", "audit", "operator_release")

// operatorCompleteScript: ARGV 2 new token, 3 status, 4 header, 5 body,
// 6 body omitted, 7 digest, 8 external id, 9 ttl ms, 10 audit entry,
// 11 tombstone ms past the record (store.DefaultTombstone).
// Unknown, released and lease-expired in-flight records become completed.
var operatorCompleteScript = script("now", "record", "audit", "retain", "operator_complete")

// beginCheckScript: KEYS = the record. ARGV 2 claim token, 3 check token,
// 4 lease ms, 5 due ("1": only when the next check is due). Code 1 when
// the lease is the caller's. The record's lifetime and index entry stay.
var beginCheckScript = script("now", "record", "begin_check")

// endCheckScript: ARGV 2 claim token, 3 check token, 4 entry status,
// 5 verdict, 6 not found checks, 7 every ms, 8 next ms (0: none), 9 ttl ms,
// 10 result status, 11 result header, 12 result body, 13 result digest,
// 14 external id, 15 audit entry of an operator's check ("" for none),
// 16 tombstone ms past the record (0: none).
var endCheckScript = script("now", "record", "audit", "retain", "end_check")

// notDoneScript: ARGV 2 token, 3 status, 4 ttl ms, 5 hold ttl ms, 6 the
// budget (0: none), 7 "1" for an unknown outcome let go, 8 the reason a
// release gives (store.NotDoneRequest.ReleasedReason), 9 the notice
// channel, 10 the notice flag. Reply: 0 fenced out, 1 released, 2 held as retries exhausted.
var notDoneScript = script("now", "record", "notice", "not_done")

// redriveScript: ARGV 2 new token, 3 lease ms, 4 hold ttl ms, 5 audit
// entry. Reply {code, now, record}.
var redriveScript = script("now", "record", "audit", "redrive")

var allScripts = []*goredis.Script{
	claimScript, renewScript, completeScript, releaseScript, markUnknownScript,
	operatorReleaseScript, operatorCompleteScript,
	beginCheckScript, endCheckScript, notDoneScript, redriveScript,
}

// Codes of the end check script.
const (
	codeCheckRefused  = 0 // not under the lease and claim: nothing changed
	codeCheckHeld     = 1 // recorded; the record stays held
	codeCheckApplied  = 2 // recorded; completed with the lookup's answer
	codeCheckReleased = 3 // recorded; released
)

// run runs a script on the record's slot: EVALSHA, or EVAL when the
// server's script cache lost it (after a restart or a failover to a node
// that never loaded it). For completions on a store with WaitReplicas, a
// WAIT follows in the same pipeline: one round trip, on the connection
// that made the write, so it waits for exactly that write. Claims run
// through runClaim.
func (s *Store) run(ctx context.Context, op, id string, sc *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if s.wait <= 0 || !waitedOp(op) {
		return s.batch.do(ctx, sc, keys, args)
	}
	pipeline := s.client.Pipeline
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		// A keyless WAIT in a cluster pipeline would go to any node: pin
		// the pipeline to the node that owns the record.
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return failedCmd(ctx, err)
		}
		pipeline = node.Pipeline
	}
	cmd, wait := s.runWaiting(ctx, pipeline(), sc.EvalSha, keys, args)
	if isNoScript(cmd.Err()) {
		cmd, wait = s.runWaiting(ctx, pipeline(), sc.Eval, keys, args)
	}
	if isRedirect(cmd.Err()) {
		// The slot moved between the cluster map and the call: the
		// script did not run. Let the cluster client follow the
		// redirection; this one write goes unwaited, and says so.
		cmd = sc.Run(ctx, s.client, keys, args...)
		if cmd.Err() == nil {
			s.shortWait(op, id, 0, errors.New("slot moved; WAIT skipped"))
		}
		return cmd
	}
	if cmd.Err() != nil {
		return cmd
	}
	n, err := wait.Int64()
	if err != nil || int(n) < s.wait {
		s.shortWait(op, id, int(n), err)
	}
	return cmd
}

// runClaim runs the claim script and returns its reply. On a store with
// WaitReplicas, a claim that took the record (created it, took it over, or
// found it already held with its token) is followed by a WAIT on the same
// connection, a second round trip: a replay, a conflict or a hold never
// waits, so replays keep their speed and keep serving while replicas are
// gone. A WAIT that came short is reported to OnWaitShort; with WaitStrict
// it is also returned, and the caller must not use the claim.
func (s *Store) runClaim(ctx context.Context, id string, keys []string, args ...any) ([]any, *WaitShortfall, error) {
	if s.wait <= 0 {
		v, err := s.batch.do(ctx, claimScript, keys, args).Slice()
		return v, nil, err
	}
	var conn *goredis.Conn
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		node, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, nil, err
		}
		conn = node.Conn()
	case *goredis.Client:
		conn = c.Conn()
	default:
		return nil, nil, errors.New("store: WAIT needs a single-node, Sentinel or Cluster client")
	}
	defer conn.Close()
	cmd := claimScript.EvalSha(ctx, conn, keys, args...)
	if isNoScript(cmd.Err()) {
		cmd = claimScript.Eval(ctx, conn, keys, args...)
	}
	moved := isRedirect(cmd.Err())
	if moved {
		// The slot moved between the cluster map and the call: the script
		// did not run. Let the cluster client follow the redirection; the
		// claim cannot be waited for on this connection.
		cmd = claimScript.Run(ctx, s.client, keys, args...)
	}
	v, err := cmd.Slice()
	if err != nil || len(v) == 0 {
		return v, nil, err
	}
	switch code, _ := v[0].(int64); code {
	case codeCreated, codeTakeOver, codeOwned:
	default:
		return v, nil, nil // nothing taken: nothing to wait for
	}
	ws := WaitShortfall{Op: "claim", ID: id, Wanted: s.wait, Refused: s.waitStrict}
	if moved {
		ws.Err = errors.New("slot moved; WAIT skipped")
	} else {
		n, err := conn.Do(ctx, "wait", s.wait, ms(s.waitTimeout)).Int64()
		if err == nil && int(n) >= s.wait {
			return v, nil, nil
		}
		ws.Acked, ws.Err = int(n), err
	}
	if s.onWaitShort != nil {
		s.onWaitShort(ws)
	}
	if !s.waitStrict {
		return v, nil, nil
	}
	return v, &ws, nil
}

func failedCmd(ctx context.Context, err error) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

type scriptCall func(ctx context.Context, c goredis.Scripter, keys []string, args ...any) *goredis.Cmd

func (s *Store) runWaiting(ctx context.Context, pipe goredis.Pipeliner, call scriptCall, keys []string, args []any) (*goredis.Cmd, *goredis.Cmd) {
	cmd := call(ctx, pipe, keys, args...)
	// ms rounds up: the timeout is never 0, which would block for good.
	wait := pipe.Do(ctx, "wait", s.wait, ms(s.waitTimeout))
	_, _ = pipe.Exec(ctx) // errors are on the commands
	return cmd, wait
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

func isRedirect(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "MOVED ") || goredis.HasErrorPrefix(err, "ASK "))
}
