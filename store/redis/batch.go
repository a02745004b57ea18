package redis

import (
	"context"
	"runtime"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batcher sends the scripts of concurrent calls together. A call that finds
// a connection free goes out at once, alone (one EVALSHA, as without
// batching); calls that come while every lane is busy wait and leave
// together, as one pipeline (one write and one read for all of them), as
// soon as a lane is free: what auto-pipelining clients do. Under load this
// turns two syscalls and a wake-up per call into two per batch, for the
// gateway and for Redis alike.
type batcher struct {
	client  goredis.UniversalClient
	timeout time.Duration // bounds a batch's round trip

	mu      sync.Mutex
	pending []*batchCall
	busy    int // lanes sending
	lanes   int // lanes that may send at once
}

type batchCall struct {
	ctx  context.Context
	sc   *goredis.Script
	keys []string
	args []any
	cmd  *goredis.Cmd
	done chan struct{}
}

func newBatcher(client goredis.UniversalClient, timeout time.Duration) *batcher {
	return &batcher{client: client, timeout: timeout, lanes: max(2, runtime.GOMAXPROCS(0))}
}

// do runs the script and returns its reply, or ctx's error when ctx ends
// while the call waits for a lane (the call is then not sent).
func (b *batcher) do(ctx context.Context, sc *goredis.Script, keys []string, args []any) *goredis.Cmd {
	b.mu.Lock()
	if b.busy < b.lanes && len(b.pending) == 0 {
		b.busy++
		b.mu.Unlock()
		cmd := sc.Run(ctx, b.client, keys, args...)
		b.next()
		return cmd
	}
	c := &batchCall{ctx: ctx, sc: sc, keys: keys, args: args, done: make(chan struct{})}
	b.pending = append(b.pending, c)
	if b.busy < b.lanes {
		b.busy++
		go b.drain()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// next gives up a lane, or keeps it to send what waits.
func (b *batcher) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.busy--
		return
	}
	go b.drain()
}

// drain sends the waiting calls, batch after batch, on a lane it holds,
// and gives the lane up when none wait.
func (b *batcher) drain() {
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		if len(batch) == 0 {
			b.busy--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.send(batch)
	}
}

// send runs one batch as a pipeline of EVALSHA; a call that meets an empty
// script cache is run again alone (EVAL). Calls whose caller gave up are
// not sent.
func (b *batcher) send(batch []*batchCall) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.client.Pipeline()
	sent := batch[:0:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			close(c.done)
			continue
		}
		c.cmd = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
		sent = append(sent, c)
	}
	if len(sent) > 0 {
		_, _ = pipe.Exec(ctx) // errors are on the commands
	}
	for _, c := range sent {
		if isNoScript(c.cmd.Err()) {
			c.cmd = c.sc.Run(c.ctx, b.client, c.keys, c.args...)
		}
		close(c.done)
	}
}
