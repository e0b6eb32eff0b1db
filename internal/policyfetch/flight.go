package policyfetch

import (
	"context"
	"sync"
)

// flightGroup runs one fetch per key at a time and hands its result to
// every caller that asked for the key meanwhile. The fetch does not stop
// when the caller that started it goes away; it is cancelled when the last
// caller waiting for it has gone. The zero value is ready; it is safe for
// concurrent use.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flight
}

type flight struct {
	done    chan struct{}
	mod     Module
	err     error
	waiters int
	cancel  context.CancelFunc
}

func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context) (Module, error)) (Module, error) {
	g.mu.Lock()
	c, ok := g.calls[key]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &flight{done: make(chan struct{}), cancel: cancel}
		if g.calls == nil {
			g.calls = map[string]*flight{}
		}
		g.calls[key] = c
		go func() {
			c.mod, c.err = fn(fctx)
			cancel()
			g.forget(key, c)
			close(c.done)
		}()
	}
	c.waiters++
	g.mu.Unlock()

	select {
	case <-c.done:
		return c.mod, c.err
	case <-ctx.Done():
		g.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
			g.forgetLocked(key, c)
		}
		g.mu.Unlock()
		return Module{}, context.Cause(ctx)
	}
}

// waiting returns how many callers wait for key.
func (g *flightGroup) waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c.waiters
	}
	return 0
}

func (g *flightGroup) forget(key string, c *flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetLocked(key, c)
}

func (g *flightGroup) forgetLocked(key string, c *flight) {
	if g.calls[key] == c {
		delete(g.calls, key)
	}
}
