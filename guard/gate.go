package guard

import (
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/unrecorded"
	"github.com/idemgate/idemgate/verify"
)

// Gate is what the steps of a guarded request use: the store and the
// bookkeeping around it. A handler provisions one, and hands it each
// request's Operation.
type Gate struct {
	Store store.Engine
	// Use is the handler's use of the store (package storepool): entered
	// by work that outlives its request (a recording retried in the
	// background, a claim given back), left when that work is done.
	Use      StoreUse
	Verifier *verify.Verifier // settles held records with the upstream (package verify)
	// Kept are the results kept for want of room: the process's
	// (KeptResults; see record.go).
	Kept      *unrecorded.Completions[KeptCompletion]
	Notices   store.Notices // completion notices, when a route waits for them
	Calls     *RunningCalls // MCP tool calls this handler runs (see mcp.go); nil when it has no MCP route
	OpTimeout time.Duration // the store's op_timeout
	Logger    *zap.Logger
	Metrics   *metrics.Set
}

// StoreUse is a handler's use of its store (storepool.Use): the store
// stays open while it is entered.
type StoreUse interface {
	Enter()
	Leave()
}
