package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/observability"
)

// Environment is the set of policies a server evaluates, changed one policy
// (or group) at a time while requests run: the evaluation environment of
// RFC 000's hot reload.
//
// Requests evaluate on a snapshot (an *Engine) taken when they start. A
// change builds the new version of a policy completely (module fetched and
// compiled, instances initialised, settings validated) before a new
// snapshot takes the old one's place, so a version that fails to build
// never serves. A snapshot's policies are released once it is no longer
// current and its last request has finished; a policy the new snapshot
// still has keeps its instances. Compiled modules and waPC/WASI instance
// pools are shared by module digest between the policies that use them,
// and freed when the last of those policies is released.
//
// Changes are serialised; evaluation is safe for concurrent use with them
// and with each other.
type Environment struct {
	opts Options

	// mu serialises changes; stateMu guards entries, failed, closed and
	// the entries' status, which changes write only after building, so
	// that Status never waits for a build.
	mu      sync.Mutex
	stateMu sync.Mutex
	entries map[string]*entry // what is served, by top-level id
	failed  map[string]error  // ids whose last change failed, with why
	aliases map[string]string // other ids of served policies: alias -> id
	closed  bool
	current atomic.Pointer[Engine]

	refMu  sync.Mutex // guards entry.refs and shared
	shared map[string]*sharedRunner

	inventories regoInventories // the cluster data Rego policies share
}

// entry is one top-level policy or group as loaded, with its members: the
// unit that is added, replaced and removed.
type entry struct {
	id       string
	config   *PolicyConfig
	policies map[string]*Policy // the entry's id and, for a group, group/member
	status   PolicyStatus
	refs     int // snapshots holding the entry; guarded by Environment.refMu
}

// sharedRunner is a runner shared by the policies whose module has the same
// digest (waPC and WASI pools), with the number of policies holding it.
type sharedRunner struct {
	run  runner
	refs int
}

// PolicyStatus is what the environment says of one top-level policy or
// group.
type PolicyStatus struct {
	ID string `json:"id"`
	// State is StateActive, StateStale (a newer version failed: the
	// previous one serves) or StateFailed (nothing serves: requests get 404,
	// or with ContinueOnErrors at start the load error).
	State string `json:"state"`
	// Generation counts the versions of the policy loaded since the
	// environment started; zero when none ever loaded.
	Generation int64 `json:"generation"`
	// Digests are the sha256 digests of the modules serving, one per
	// member for a group; "builtin" for a native policy.
	Digests  []string  `json:"digests,omitempty"`
	LoadedAt time.Time `json:"loadedAt,omitzero"`
	// LastError is why the last change of the policy failed.
	LastError string `json:"lastError,omitempty"`
}

// Policy states of PolicyStatus.
const (
	StateActive = "active"
	StateStale  = "stale"
	StateFailed = "failed"
)

// Change is what Apply did to one top-level policy or group.
type Change struct {
	ID     string
	Action string // ActionAdd, ActionUpdate or ActionRemove
	Err    error  // why the new version did not take the old one's place
}

// Actions of a Change.
const (
	ActionAdd    = "add"
	ActionUpdate = "update"
	ActionRemove = "remove"
)

// NewEnvironment returns an environment serving no policy.
func NewEnvironment(opts Options) (*Environment, error) {
	if opts.Runtime == nil {
		return nil, errors.New("engine: a wasm runtime is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Recorder == nil {
		opts.Recorder = nopRecorder{}
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.Fetch == nil {
		opts.Fetch = FetchFile
	}
	env := &Environment{
		opts:    opts,
		entries: map[string]*entry{},
		failed:  map[string]error{},
		shared:  map[string]*sharedRunner{},
	}
	env.current.Store(env.snapshot())
	return env, nil
}

// Init loads the policies a server starts with, into an environment that
// serves none yet. Without Options.ContinueOnErrors any failure fails Init
// (the first in id order first) and nothing is served; with it, a policy
// that fails is served as its error: it rejects every request with it.
func (env *Environment) Init(ctx context.Context, configs map[string]*PolicyConfig) error {
	env.mu.Lock()
	defer env.mu.Unlock()
	built, errs := env.build(ctx, configs, env.opts.ContinueOnErrors)
	var failures []error
	for _, id := range sortedKeys(configs) {
		if err := errs[id]; err != nil && !env.opts.ContinueOnErrors {
			failures = append(failures, err)
		}
	}
	if len(failures) > 0 {
		for _, e := range built {
			env.drop(ctx, e)
		}
		return errors.Join(failures...)
	}
	env.stateMu.Lock()
	for _, id := range sortedKeys(configs) {
		env.entries[id] = built[id]
		if err := errs[id]; err != nil {
			env.opts.Logger.ErrorContext(ctx, "policy failed to load; it will reject every request",
				observability.KeyPolicyID, id, observability.KeyError, err)
			env.entries[id] = failedEntry(id, configs[id], errors.Unwrap(err), built[id])
			env.failed[id] = err
		}
	}
	env.stateMu.Unlock()
	env.publish()
	return nil
}

// Apply makes the environment serve configs, changing only what differs
// from what it serves: a policy that is new or whose configuration changed
// is built and takes its place, one that is gone is removed. A new version
// that fails to build leaves the previous one serving (a new policy that
// fails stays absent) and is reported in its Change and in Status. The
// policies already serving are never disturbed.
func (env *Environment) Apply(ctx context.Context, configs map[string]*PolicyConfig) []Change {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.closed {
		return nil
	}
	changed := map[string]*PolicyConfig{}
	for id, c := range configs {
		if old, ok := env.entries[id]; !ok || !old.config.equal(c) {
			changed[id] = c
		}
	}
	built, errs := env.build(ctx, changed, false)

	env.stateMu.Lock()
	var changes []Change
	for id := range env.failed {
		if _, ok := changed[id]; !ok {
			delete(env.failed, id) // removed, or back to what serves
			if e, ok := env.entries[id]; ok && e.status.State == StateStale {
				e.status.State = StateActive
			}
		}
	}
	for _, id := range sortedKeys(env.entries) {
		if _, ok := configs[id]; !ok {
			delete(env.entries, id)
			changes = append(changes, Change{ID: id, Action: ActionRemove})
		}
	}
	for _, id := range sortedKeys(changed) {
		ch := Change{ID: id, Action: ActionAdd}
		old, replaces := env.entries[id]
		if replaces {
			ch.Action = ActionUpdate
		}
		if ch.Err = errs[id]; ch.Err != nil {
			env.failed[id] = ch.Err
			if replaces && old.status.State != StateFailed {
				old.status.State = StateStale
			}
		} else {
			e := built[id]
			if replaces {
				e.status.Generation = old.status.Generation + 1
			}
			env.entries[id] = e
			delete(env.failed, id)
		}
		changes = append(changes, ch)
	}
	env.stateMu.Unlock()
	if len(changes) > 0 {
		env.publish()
	}
	return changes
}

// Changed returns the policies of configs that Apply would build (new
// ones, and those that differ from what serves), each with the URIs of the
// modules it loads, so that a caller can fetch them first. A closed
// environment builds nothing: none.
func (env *Environment) Changed(configs map[string]*PolicyConfig) map[string][]string {
	env.stateMu.Lock()
	defer env.stateMu.Unlock()
	out := map[string][]string{}
	if env.closed {
		return out
	}
	for id, c := range configs {
		if old, ok := env.entries[id]; !ok || !old.config.equal(c) {
			out[id] = c.modules()
		}
	}
	return out
}

// SetAliases makes each policy of aliases (alias -> id) answer under its
// alias as well, in place of the aliases set before; a group's members
// answer under alias/member. An alias of an id not served answers nothing
// until that id is. Aliases never shadow an id: an alias that is also an id
// is ignored.
func (env *Environment) SetAliases(aliases map[string]string) {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.closed {
		return
	}
	env.stateMu.Lock()
	env.aliases = maps.Clone(aliases)
	env.stateMu.Unlock()
	env.publish()
}

// Configs returns the configuration of every policy served, by id: the
// version serving, also where a newer one failed to load.
func (env *Environment) Configs() map[string]*PolicyConfig {
	env.stateMu.Lock()
	defer env.stateMu.Unlock()
	out := make(map[string]*PolicyConfig, len(env.entries))
	for id, e := range env.entries {
		out[id] = e.config
	}
	return out
}

// Status returns the status of every policy served or that failed, sorted
// by id.
func (env *Environment) Status() []PolicyStatus {
	env.stateMu.Lock()
	defer env.stateMu.Unlock()
	ids := map[string]bool{}
	for id := range env.entries {
		ids[id] = true
	}
	for id := range env.failed {
		ids[id] = true
	}
	out := make([]PolicyStatus, 0, len(ids))
	for _, id := range sortedKeys(ids) {
		st := PolicyStatus{ID: id, State: StateFailed}
		if e, ok := env.entries[id]; ok {
			st = e.status
		}
		if err, ok := env.failed[id]; ok {
			st.LastError = err.Error()
		}
		out = append(out, st)
	}
	return out
}

// Validate evaluates an admission request with the policy serving now; see
// Engine.Validate.
func (env *Environment) Validate(ctx context.Context, policyID string, req *admission.Request, origin Origin) (*admission.Response, error) {
	e := env.acquire()
	defer env.release(e)
	return e.Validate(ctx, policyID, req, origin)
}

// ValidateRaw evaluates a raw request with the policy serving now; see
// Engine.ValidateRaw.
func (env *Environment) ValidateRaw(ctx context.Context, policyID string, req *admission.RawRequest) (*admission.Response, error) {
	e := env.acquire()
	defer env.release(e)
	return e.ValidateRaw(ctx, policyID, req)
}

// Engine returns the snapshot serving now, for reading (its policies and
// their ids): evaluating on it races with changes, use Validate.
func (env *Environment) Engine() *Engine { return env.current.Load() }

// Close stops serving: every policy is released once the requests in
// flight have finished.
func (env *Environment) Close(ctx context.Context) {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.closed {
		return
	}
	env.stateMu.Lock()
	env.closed = true
	clear(env.entries)
	clear(env.failed)
	env.stateMu.Unlock()
	env.publish()
}

// acquire returns the current snapshot, counting the caller among its
// users. A snapshot whose count is zero is being released: it is no longer
// current, so the next look finds the one that replaced it.
func (env *Environment) acquire() *Engine {
	for {
		e := env.current.Load()
		if n := e.refs.Load(); n > 0 && e.refs.CompareAndSwap(n, n+1) {
			return e
		}
	}
}

// release ends a use of a snapshot; the last one releases the entries only
// it held.
func (env *Environment) release(e *Engine) {
	if e.refs.Add(-1) > 0 {
		return
	}
	var drop []*entry
	env.refMu.Lock()
	for _, en := range e.entries {
		if en.refs--; en.refs == 0 {
			drop = append(drop, en)
		}
	}
	env.refMu.Unlock()
	for _, en := range drop {
		env.drop(context.Background(), en)
	}
}

// publish makes a snapshot of the entries current and lets the previous
// one go once its requests have finished. Call with mu held.
func (env *Environment) publish() {
	env.stateMu.Lock()
	next := env.snapshot()
	env.stateMu.Unlock()
	env.refMu.Lock()
	for _, en := range next.entries {
		en.refs++
	}
	env.refMu.Unlock()
	if prev := env.current.Swap(next); prev != nil {
		env.release(prev)
	}
	if !env.closed {
		// Building ran guest code that requests mostly do not: let its
		// pages leave the resident set.
		env.opts.Runtime.ReleaseCode()
	}
}

// snapshot returns an engine serving the entries, held once (by the
// environment, until the next publish).
func (env *Environment) snapshot() *Engine {
	e := &Engine{
		policies:              map[string]*Policy{},
		alwaysAcceptNamespace: env.opts.AlwaysAcceptNamespace,
		recorder:              env.opts.Recorder,
		logger:                env.opts.Logger,
	}
	for _, id := range sortedKeys(env.entries) {
		en := env.entries[id]
		e.entries = append(e.entries, en)
		for pid, p := range en.policies {
			e.policies[pid] = p
			if en.config.Name != "" {
				if e.names == nil {
					e.names = map[string]string{}
				}
				e.names[pid] = en.config.Name + strings.TrimPrefix(pid, id) // a group's members too
			}
		}
	}
	for alias, id := range env.aliases {
		en, ok := env.entries[id]
		if _, isID := env.entries[alias]; !ok || isID {
			continue
		}
		for pid, p := range en.policies {
			e.policies[alias+strings.TrimPrefix(pid, id)] = p // a group's members too
		}
	}
	e.refs.Store(1)
	return e
}

// build builds an entry for each config. An entry that fails is released,
// or with partial returned as far as it loaded (a group's members that did
// load, and the others as their errors), which a ContinueOnErrors start
// serves beside the entry's error.
func (env *Environment) build(ctx context.Context, configs map[string]*PolicyConfig, partial bool) (map[string]*entry, map[string]error) {
	l := &loader{opts: env.opts, env: env, modules: map[string]*moduleLoad{}}
	defer l.releaseModules(ctx)
	l.compileAll(ctx, configs)
	l.preparePools(ctx, configs)
	built, errs := map[string]*entry{}, map[string]error{}
	for _, id := range sortedKeys(configs) {
		c := configs[id]
		for _, key := range c.IgnoredKeys {
			env.opts.Logger.WarnContext(ctx, "unknown key of the policy's configuration ignored",
				observability.KeyPolicyID, id, observability.KeyConfigKey, key)
		}
		e := &entry{id: id, config: c, policies: map[string]*Policy{}}
		e.status = PolicyStatus{ID: id, State: StateActive, Generation: 1, LoadedAt: time.Now()}
		var err error
		if !c.IsGroup() {
			var p *Policy
			if p, err = l.policy(ctx, id, c); err == nil {
				e.policies[id] = p
			}
		} else {
			var g *Policy
			var members map[string]memberLoad
			g, members, err = l.group(ctx, id, c)
			for _, m := range members {
				if m.err == nil {
					e.policies[m.ID] = m.policy
				} else if partial {
					e.policies[m.ID] = &Policy{ID: m.ID, Mode: ModeProtect, initErr: m.err}
				}
			}
			if err == nil {
				e.policies[id] = g
			}
		}
		for _, uri := range c.modules() {
			e.status.Digests = append(e.status.Digests, l.digest(uri))
		}
		if err != nil {
			errs[id] = fmt.Errorf("policy %q: %w", id, err)
			if !partial {
				env.drop(ctx, e)
				continue
			}
		}
		built[id] = e
	}
	return built, errs
}

// failedEntry is what a ContinueOnErrors start serves for a policy that
// failed to load: its error, and the members of a group that did load.
func failedEntry(id string, c *PolicyConfig, err error, partial *entry) *entry {
	e := &entry{id: id, config: c, policies: map[string]*Policy{}}
	if partial != nil {
		e.policies = partial.policies
	}
	e.policies[id] = &Policy{ID: id, Mode: c.Mode(), initErr: err}
	e.status = PolicyStatus{ID: id, State: StateFailed}
	return e
}

// drop releases what an entry's policies hold.
func (env *Environment) drop(ctx context.Context, e *entry) {
	for _, p := range e.policies {
		if p.release != nil {
			p.release(ctx)
		}
	}
}

// takeShared returns the runner shared under key, counting one more
// holder, or nil when there is none yet.
func (env *Environment) takeShared(key string) runner {
	env.refMu.Lock()
	defer env.refMu.Unlock()
	if s, ok := env.shared[key]; ok {
		s.refs++
		return s.run
	}
	return nil
}

// hasShared reports whether a runner is shared under key.
func (env *Environment) hasShared(key string) bool {
	env.refMu.Lock()
	defer env.refMu.Unlock()
	_, ok := env.shared[key]
	return ok
}

// addShared shares a new runner under key, with one holder.
func (env *Environment) addShared(key string, r runner) {
	env.refMu.Lock()
	defer env.refMu.Unlock()
	env.shared[key] = &sharedRunner{run: r, refs: 1}
}

// releaseShared drops a holder of the runner shared under key, closing it
// after the last one.
func (env *Environment) releaseShared(ctx context.Context, key string) {
	env.refMu.Lock()
	s, ok := env.shared[key]
	if ok {
		if s.refs--; s.refs > 0 {
			ok = false
		} else {
			delete(env.shared, key)
		}
	}
	env.refMu.Unlock()
	if ok {
		s.run.close(ctx)
	}
}

// SharedRunners is the number of waPC and WASI instance pools the
// environment holds. It exists for tests that check pools are freed.
func (env *Environment) SharedRunners() int {
	env.refMu.Lock()
	defer env.refMu.Unlock()
	return len(env.shared)
}

// equal reports whether two configurations load the same policy: hot
// reload rebuilds a policy whose configuration is not equal to the one
// serving. It compares the JSON form and then, one by one, the fields JSON
// leaves out; TestEqualSeesEveryField fails when a field, at any depth,
// can change without equal seeing it.
func (c *PolicyConfig) equal(o *PolicyConfig) bool {
	a, errA := json.Marshal(c)
	b, errB := json.Marshal(o)
	return errA == nil && errB == nil && string(a) == string(b) &&
		c.ContextAwareFromMetadata == o.ContextAwareFromMetadata && c.Name == o.Name &&
		slices.Equal(c.IgnoredKeys, o.IgnoredKeys) // a new one is warned about
}
