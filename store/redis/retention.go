package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// Tombstones and twin entries (see store/retention.go). A tombstone is a
// string beside its record, in the record's slot: prefix + "{" + tag + "}"
// + ":t:" + id, "<completed at ms>:<status>:<reason>", written by the
// completion's script with PX (the record's TTL plus the tombstone's) and
// read by the claim script of a key that has no record. A twin entry is
// prefix + "{" + Shard(digest) + "}:w:" + digest, "<completed at ms>:<record
// id>", living the twin window (PX). On a single node the claim and
// completion scripts read and write it in their own step; on a Cluster it
// lives in another slot than the record, which one script cannot reach:
// there a claim with a twin digest reads it with a GET before its script
// (one more round trip), and a completion writes it with a SET after its
// script (one more), neither atomic with the script, so a completion
// landing meanwhile is seen by the next claim, not this one. Neither key
// is a record key (idFromKey refuses them).
const (
	tombstoneInfix = ":t:"
	twinInfix      = ":w:"
)

// TombstoneKey is the Redis key of record id's tombstone.
func (s *Store) TombstoneKey(id string) string {
	return s.prefix + "{" + Shard(id) + "}" + tombstoneInfix + id
}

// TwinKey is the Redis key of the twin entry of digest.
func (s *Store) TwinKey(digest string) string {
	return s.prefix + "{" + Shard(digest) + "}" + twinInfix + digest
}

// claimRetention returns the claim script's keys and its twin and held
// arguments: on a single node the twin entry's key is KEYS[6]; on a
// Cluster the entry is read here. held is the record TwinHold creates, as
// the script stamps it.
func (s *Store) claimRetention(ctx context.Context, req store.ClaimRequest, a store.ClaimArgs) (keys []string, twin, held string, err error) {
	keys = s.keys(req.ID)
	if req.Twin == "" {
		return keys, "", "", nil
	}
	if a.OnTwin == store.TwinHold {
		// as store.HeldSamePayload: never executed, no check
		c := claimPart(req)
		c[cCheck], c[cCheckAfter] = "", ""
		res := [numResultFields]string{rReason: store.ReasonSamePayload}
		held = string((&blob{state: stUnknown, attempts: 1, claim: c, result: &res}).encode())
	}
	if !s.clustered {
		return append(keys, s.TwinKey(req.Twin)), "", held, nil
	}
	twin, err = s.client.Get(ctx, s.TwinKey(req.Twin)).Result()
	if err == goredis.Nil {
		err = nil
	}
	return keys, twin, held, err
}

// pastOf reads the tombstone and twin entry a claim script found (v:
// tombstone, twin; "" for none) into res.
func pastOf(res *store.ClaimResult, id string, v []any) error {
	if len(v) < 2 {
		return nil // a script that found no record and reported nothing
	}
	tomb, _ := v[0].(string)
	twin, _ := v[1].(string)
	if tomb != "" {
		ca, rest, _ := strings.Cut(tomb, ":")
		sc, rsn, _ := strings.Cut(rest, ":")
		at, err1 := strconv.ParseInt(ca, 10, 64)
		status, err2 := strconv.Atoi(sc)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("store: the tombstone of %s is malformed", id)
		}
		res.Tombstone = &store.Tombstone{ID: id, CompletedAt: time.UnixMilli(at), Status: status, Reason: rsn}
	}
	if twin != "" {
		ca, other, _ := strings.Cut(twin, ":")
		at, err := strconv.ParseInt(ca, 10, 64)
		if err != nil || !store.ValidID(other) {
			return fmt.Errorf("store: the twin entry found by %s is malformed", id)
		}
		res.Twin = &store.Twin{ID: other, CompletedAt: time.UnixMilli(at)}
	}
	return nil
}

// complete runs the completion script with the record as built (stored)
// and what it leaves beside it: the tombstone, and the twin entry (on a
// Cluster written after the script, once it stored the result).
func (s *Store) complete(ctx context.Context, req store.CompleteRequest, stored []byte, ttl time.Duration, now time.Time, status string) (bool, error) {
	c := req.Claim
	keys := s.keys(c.ID)
	ca := strconv.FormatInt(now.UnixMilli(), 10)
	tomb := ms(req.Tombstone)
	twin, window := req.TwinEntry()
	twinValue := ""
	if twin != "" {
		twinValue = ca + ":" + c.ID
		if !s.clustered {
			keys = append(keys, s.TwinKey(twin))
		}
	}
	ok, err := s.fencedKeys(ctx, "complete", completeScript, c.ID, keys, c.Token, stored, ms(ttl),
		tomb, ca+":"+status+":", twinValue, ms(window), s.NoticeChannel(), s.notices.flag())
	if !ok || err != nil || twin == "" || !s.clustered {
		return ok, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	// The result is stored: a twin entry that fails to be written costs
	// the detector one twin, not the completion.
	_ = s.client.Set(ctx, s.TwinKey(twin), twinValue, window).Err()
	return true, nil
}
