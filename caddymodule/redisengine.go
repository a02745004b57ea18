package caddymodule

import (
	"context"
	"errors"
	"time"

	"github.com/idemgate/idemgate/store"
)

// redisEngine puts the Redis store behind the store.Engine contract until
// the Redis side takes a CompleteRequest, an operator Action and Secret
// itself. Meanwhile a Complete of a missing record is not written (false,
// as before), operator actions are logged but not kept on the record, and
// Secret fails.
type redisEngine struct{ *store.Store }

var _ store.Engine = redisEngine{}

func (e redisEngine) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	return e.Store.Complete(ctx, req.Claim.ID, req.Claim.Token, req.Result, req.TTL)
}

func (e redisEngine) OperatorRelease(ctx context.Context, id string, _ store.Action, ttl time.Duration) (*store.Record, error) {
	return e.Store.OperatorRelease(ctx, id, ttl)
}

func (e redisEngine) OperatorComplete(ctx context.Context, id string, res store.Result, _ store.Action, ttl time.Duration) (*store.Record, error) {
	return e.Store.OperatorComplete(ctx, id, res, ttl)
}

func (e redisEngine) Secret(context.Context) ([]byte, error) {
	return nil, errors.New("store: the Redis store keeps no secret yet")
}
