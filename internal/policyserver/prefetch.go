package policyserver

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/policyfetch"
)

// stateFetching is the state GET /policies gives a policy whose new
// version waits for its modules to be fetched.
const stateFetching = "fetching"

// prefetcher fetches the remote modules of the policies a reload changes,
// in the background, so that a slow registry or HTTPS server never holds a
// reload, nor the policies that do not wait for it: Reload leaves a policy
// out (its previous version keeps serving) until its modules have come,
// and the end of a fetch reloads again. Its methods are safe for
// concurrent use.
type prefetcher struct {
	fetch func(ctx context.Context, uri string) ([]byte, error)
	// done is called, in a goroutine of its own, when a fetch ends, with
	// the context hold was given (without its end).
	done func(ctx context.Context, uri string, err error)

	mu    sync.Mutex
	byURI map[string]*prefetch
	held  map[string][]string // policy id -> the URIs it waits for
}

// prefetch is one module fetch and, once done, its outcome.
type prefetch struct {
	finished     atomic.Bool
	data         []byte // set before finished
	err          error
	bytes, total atomic.Int64
}

func newPrefetcher(fetch func(context.Context, string) ([]byte, error), done func(context.Context, string, error)) *prefetcher {
	return &prefetcher{fetch: fetch, done: done, byURI: map[string]*prefetch{}, held: map[string][]string{}}
}

// remote reports whether fetching uri may take long: a registry or an
// HTTP(S) server, not a file or a built-in module.
func remote(uri string) bool {
	return !strings.HasPrefix(uri, "file://") && !strings.HasPrefix(uri, "builtin://")
}

// hold takes the policies a reload is about to apply (changed: what
// Environment.Changed returns) and leaves out of configs, in place, those
// whose remote modules have not all come yet: each keeps the version that
// serves (current), or stays absent. It starts the fetches not started yet,
// under ctx's values (not its end), and returns the URIs whose fetch ended,
// which the reload uses: forget them once it has applied.
func (p *prefetcher) hold(ctx context.Context, configs, current map[string]*engine.PolicyConfig, changed map[string][]string) (used []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := map[string][]string{}
	for id, uris := range changed {
		var waiting []string
		for _, uri := range uris {
			if !remote(uri) {
				continue
			}
			// A fetch this reload starts is waited for even when it has
			// already ended (a refused connection ends at once): the
			// reload its end starts applies its outcome, once. Used here
			// too, it would be applied, counted and fetched again there.
			f, ok := p.byURI[uri]
			if !ok {
				f = p.startLocked(ctx, uri)
			}
			if !ok || !f.finished.Load() {
				waiting = append(waiting, uri)
			} else if !slices.Contains(used, uri) {
				used = append(used, uri)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		held[id] = waiting
		if c, ok := current[id]; ok {
			configs[id] = c
		} else {
			delete(configs, id)
		}
	}
	p.held = held
	return used
}

// startLocked starts fetching uri.
func (p *prefetcher) startLocked(ctx context.Context, uri string) *prefetch {
	f := &prefetch{}
	f.total.Store(-1)
	p.byURI[uri] = f
	ctx = context.WithoutCancel(ctx)
	fctx := policyfetch.WithProgress(ctx, func(done, total int64) {
		f.bytes.Store(done)
		f.total.Store(total)
	})
	go func() {
		f.data, f.err = p.fetch(fctx, uri)
		f.finished.Store(true)
		p.done(ctx, uri, f.err)
	}()
	return f
}

// take returns the outcome of a fetch of uri that has ended.
func (p *prefetcher) take(uri string) (data []byte, err error, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, found := p.byURI[uri]
	if !found || !f.finished.Load() {
		return nil, nil, false
	}
	return f.data, f.err, true
}

// forget drops the outcomes of the fetches of uris: a later change of a
// policy fetches its modules again, as a reload always has.
func (p *prefetcher) forget(uris []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, uri := range uris {
		if f, ok := p.byURI[uri]; ok && f.finished.Load() {
			delete(p.byURI, uri)
		}
	}
}

// fetchStatus is the progress of the fetches a policy waits for.
type fetchStatus struct {
	Modules []string `json:"modules"`
	// Bytes are the bytes of the modules received so far; Total what
	// their servers announced, absent when one did not say.
	Bytes int64 `json:"bytes"`
	Total int64 `json:"total,omitempty"`
}

// status returns the progress of every policy held, by id; nil for a nil
// prefetcher (cluster mode).
func (p *prefetcher) status() map[string]*fetchStatus {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]*fetchStatus{}
	for id, uris := range p.held {
		st := &fetchStatus{Modules: uris}
		for _, uri := range uris {
			if f, ok := p.byURI[uri]; ok {
				st.Bytes += f.bytes.Load()
				if t := f.total.Load(); t >= 0 && st.Total >= 0 {
					st.Total += t
				} else {
					st.Total = -1
				}
			}
		}
		st.Total = max(st.Total, 0) // unknown: omitted
		out[id] = st
	}
	return out
}

// policyState is one policy of GET /policies: what the environment says
// of it, and the fetch it waits for, when it does.
type policyState struct {
	engine.PolicyStatus
	Fetch *fetchStatus `json:"fetch,omitempty"`
}

// withFetches adds the policies held for their fetches to statuses.
func withFetches(statuses []engine.PolicyStatus, fetching map[string]*fetchStatus) []policyState {
	out := make([]policyState, 0, len(statuses)+len(fetching))
	for _, st := range statuses {
		ps := policyState{PolicyStatus: st}
		if f, ok := fetching[st.ID]; ok {
			ps.State, ps.Fetch = stateFetching, f
			delete(fetching, st.ID)
		}
		out = append(out, ps)
	}
	for _, id := range sortedIDs(fetching) {
		out = append(out, policyState{PolicyStatus: engine.PolicyStatus{ID: id, State: stateFetching}, Fetch: fetching[id]})
	}
	return out
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
