package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/wasm"
)

// Options configure Load.
type Options struct {
	Runtime  *wasm.Runtime
	Logger   *slog.Logger
	Recorder Recorder

	// DefaultTimeout bounds every evaluation unless a policy sets
	// timeoutEvalSeconds; TimeoutProtection false disables both (compat 3.7).
	DefaultTimeout    time.Duration
	TimeoutProtection bool

	// ContinueOnErrors keeps the policies that fail to load, answering every
	// request with their error, instead of failing Load.
	ContinueOnErrors bool

	// AlwaysAcceptNamespace: requests in this namespace are accepted without
	// evaluation.
	AlwaysAcceptNamespace string

	// Workers is how many guest calls of one policy run at once (the
	// runtime bounds them overall); keep it below Runtime.GuestSlots so a
	// policy that loops cannot take every slot. Zero means the number of
	// CPUs.
	Workers int

	// CompatVersion is the Kubewarden version whose minimumKubewardenVersion
	// the server satisfies.
	CompatVersion string

	// WasmCELPolicy runs Kubewarden's published cel-policy module in wasm
	// instead of natively.
	WasmCELPolicy bool

	// Fetch returns a module's bytes. Nil reads file:// URLs only.
	Fetch func(ctx context.Context, uri string) ([]byte, error)

	// HostCapabilities answers the oci, net, crypto and kubernetes host
	// calls that policies were granted. Nil: those calls fail.
	HostCapabilities HostCapabilities
}

// loadTimeout bounds module initialisation and settings validation of one
// policy when no evaluation timeout applies.
const loadTimeout = 60 * time.Second

// Load loads every policy: fetches and compiles its module, checks its
// metadata and validates its settings. Without ContinueOnErrors the first
// failure (in id order) is returned; with it, failed policies are kept and
// answer every request with their error.
func Load(ctx context.Context, configs map[string]*PolicyConfig, opts Options) (*Engine, error) {
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
	e := &Engine{
		policies:              make(map[string]*Policy, len(configs)),
		alwaysAcceptNamespace: opts.AlwaysAcceptNamespace,
		recorder:              opts.Recorder,
		logger:                opts.Logger,
	}
	l := &loader{opts: opts, modules: map[string]*moduleLoad{}}
	ids := sortedKeys(configs)

	// Fetch and compile every distinct module in parallel first.
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, id := range ids {
		for _, uri := range configs[id].modules() {
			if ml := l.module(uri); !l.native(uri) && ml.claim() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					ml.load(ctx, uri, opts)
				}()
			}
		}
	}
	wg.Wait()

	var errs []error
	add := func(id string, c *PolicyConfig, p *Policy, err error) {
		if err != nil {
			err = fmt.Errorf("policy %q: %w", id, err)
			if !opts.ContinueOnErrors {
				errs = append(errs, err)
				return
			}
			opts.Logger.ErrorContext(ctx, "policy failed to load; it will reject every request",
				observability.KeyPolicyID, id, observability.KeyError, err)
			p = &Policy{ID: id, Mode: c.Mode(), initErr: errors.Unwrap(err)}
		}
		e.policies[id] = p
	}
	for _, id := range ids {
		c := configs[id]
		if !c.IsGroup() {
			p, err := l.policy(ctx, id, c)
			add(id, c, p, err)
			continue
		}
		g, members, err := l.group(ctx, id, c)
		for _, m := range members {
			// A member's failure is reported once, with its group's.
			switch {
			case m.err == nil:
				e.policies[m.ID] = m.policy
			case opts.ContinueOnErrors:
				e.policies[m.ID] = &Policy{ID: m.ID, Mode: ModeProtect, initErr: m.err}
			}
		}
		add(id, c, g, err)
	}
	e.runners = l.runners()
	if len(errs) > 0 {
		e.Close(ctx)
		return nil, errors.Join(errs...)
	}
	// Guest initialisation and settings validation ran code that requests
	// mostly do not: let its pages leave the resident set.
	opts.Runtime.ReleaseCode()
	return e, nil
}

// loader holds what Load shares between policies: modules by URI and the
// waPC pools by module digest.
type loader struct {
	opts    Options
	modules map[string]*moduleLoad
	mu      sync.Mutex
	wapc    map[string]*wasm.Wapc
	wasi    map[string]wasiRunner // by module digest
	owned   []runner              // runners of a single policy
}

type moduleLoad struct {
	claimed bool
	mod     *wasm.Module
	meta    *metadata.Metadata
	err     error
}

func (l *loader) module(uri string) *moduleLoad {
	ml, ok := l.modules[uri]
	if !ok {
		ml = &moduleLoad{}
		l.modules[uri] = ml
	}
	return ml
}

func (ml *moduleLoad) claim() bool {
	if ml.claimed {
		return false
	}
	ml.claimed = true
	return true
}

func (ml *moduleLoad) load(ctx context.Context, uri string, opts Options) {
	b, err := opts.Fetch(ctx, uri)
	if err != nil {
		ml.err = err // it names the module
		return
	}
	meta, err := metadata.FromModule(b)
	switch {
	case errors.Is(err, metadata.ErrMissing):
		meta = &metadata.Metadata{} // Kubewarden's defaults, refused below
	case errors.Is(err, wasm.ErrNotWasm):
		ml.err = fmt.Errorf("module %s: %w", uri, err)
		return
	case err != nil:
		ml.err = fmt.Errorf("module %s: %w", uri, err)
		return
	}
	if err := meta.ValidateForServer(opts.CompatVersion); err != nil {
		ml.err = err
		return
	}
	switch meta.Mode() {
	case metadata.ModeWapc, metadata.ModeWASI:
		ml.mod, err = opts.Runtime.Compile(ctx, b)
	case metadata.ModeOPA, metadata.ModeGatekeeper:
		ml.mod, err = opts.Runtime.CompileOPA(ctx, b)
	default:
		ml.err = fmt.Errorf("execution mode %s is not supported", meta.Mode())
		return
	}
	if err != nil {
		ml.err = fmt.Errorf("module %s: %w", uri, err)
		return
	}
	ml.meta = meta
}

// policy builds one policy, single or a group member, from its
// configuration. Native policies have no metadata.
func (l *loader) policy(ctx context.Context, id string, c *PolicyConfig) (*Policy, error) {
	ml := l.modules[c.Module]
	if ml.err != nil {
		return nil, ml.err
	}
	p := &Policy{
		ID:              id,
		Mode:            c.Mode(),
		AllowedToMutate: c.AllowedToMutate,
		Message:         c.Message,
		Metadata:        ml.meta,
		settings:        c.Settings,
		host:            l.hostCalls(id, c, ml.meta),
		inflight:        make(chan struct{}, l.opts.Workers),
	}
	if len(p.settings) == 0 || string(p.settings) == "null" {
		p.settings = []byte("{}")
	}
	if l.opts.TimeoutProtection {
		p.timeout = l.opts.DefaultTimeout
		if c.TimeoutEvalSeconds != nil {
			p.timeout = time.Duration(*c.TimeoutEvalSeconds) * time.Second
		}
	}
	if l.native(c.Module) {
		run, err := newCELRunner(p.settings)
		if err != nil {
			return nil, &invalidSettingsError{err.Error()}
		}
		p.run = run
		return p, nil
	}
	initCtx, cancel := context.WithTimeout(ctx, cmp(p.timeout, loadTimeout))
	defer cancel()
	run, err := l.runner(initCtx, id, c, ml)
	if err != nil {
		if errors.Is(err, wasm.ErrDeadlineExceeded) {
			return nil, errors.New(msgTimeout)
		}
		return nil, err
	}
	p.run = run
	svr := run.validateSettings(initCtx, p.host, p.settings)
	if !svr.Valid {
		msg := "no message"
		if svr.Message != nil {
			msg = *svr.Message
		}
		return nil, &invalidSettingsError{msg}
	}
	return p, nil
}

// invalidSettingsError is a policy's verdict that its settings are invalid.
type invalidSettingsError struct{ msg string }

func (e *invalidSettingsError) Error() string { return "Policy settings are invalid: " + e.msg }

// cmp returns a if it is set, else b.
func cmp(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

// runner returns the runner of a module, sharing waPC pools between the
// policies that use the same module.
func (l *loader) runner(ctx context.Context, id string, c *PolicyConfig, ml *moduleLoad) (runner, error) {
	if mode := ml.meta.Mode(); mode == metadata.ModeOPA || mode == metadata.ModeGatekeeper {
		return l.regoRunner(ctx, id, c, ml)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ml.meta.Mode() == metadata.ModeWASI {
		if r, ok := l.wasi[ml.mod.Digest]; ok {
			return r, nil
		}
		pool, err := l.opts.Runtime.NewWASIPool(ctx, ml.mod, "validate", 2*l.opts.Workers)
		if err != nil {
			return nil, err
		}
		if l.wasi == nil {
			l.wasi = map[string]wasiRunner{}
		}
		r := wasiRunner{rt: l.opts.Runtime, mod: ml.mod, pool: pool, onWarn: l.warnStderr}
		l.wasi[ml.mod.Digest] = r
		return r, nil
	}
	if l.wapc == nil {
		l.wapc = map[string]*wasm.Wapc{}
	}
	if w, ok := l.wapc[ml.mod.Digest]; ok {
		return wapcRunner{w}, nil
	}
	w, err := l.opts.Runtime.NewWapc(ctx, ml.mod, 2*l.opts.Workers)
	if err != nil {
		return nil, err
	}
	l.wapc[ml.mod.Digest] = w
	return wapcRunner{w}, nil
}

// regoRunner returns a runner of its own to an OPA or Gatekeeper policy:
// its instances hold the policy's data.
func (l *loader) regoRunner(ctx context.Context, id string, c *PolicyConfig, ml *moduleLoad) (runner, error) {
	logger := l.opts.Logger.With(observability.KeyPolicyID, id)
	kube := newRegoContext(grantedResources(c, ml.meta), l.opts.HostCapabilities, logger)
	r, err := newRegoRunner(ctx, l.opts.Runtime, ml.mod, ml.meta.Mode(), c.Settings, kube, l.opts.Workers, logger)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.owned = append(l.owned, r)
	l.mu.Unlock()
	return r, nil
}

func (l *loader) runners() []runner {
	out := append([]runner(nil), l.owned...)
	for _, w := range l.wapc {
		out = append(out, wapcRunner{w})
	}
	for _, r := range l.wasi {
		out = append(out, r)
	}
	return out
}

func (l *loader) warnStderr(ctx context.Context, op, stderr string) {
	l.opts.Logger.WarnContext(ctx, "policy wrote to stderr", "operation", op, "stderr", stderr)
}

// NativeCELModule is the module URI of Warden's native CEL policies, which
// run in-process, without wasm, and take the settings of Kubewarden's
// cel-policy.
const NativeCELModule = "builtin://cel"

// kubewardenCELPolicy is the repository of Kubewarden's published cel-policy,
// which Warden runs natively unless told otherwise.
const kubewardenCELPolicy = "ghcr.io/kubewarden/policies/cel-policy"

// native reports whether a module runs in-process instead of in wasm.
func (l *loader) native(uri string) bool {
	return uri == NativeCELModule || (!l.opts.WasmCELPolicy && isKubewardenCELPolicy(uri))
}

// isKubewardenCELPolicy reports whether a module URI names any tag or
// digest of Kubewarden's published cel-policy.
func isKubewardenCELPolicy(uri string) bool {
	ref := strings.TrimPrefix(uri, "registry://")
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref == kubewardenCELPolicy
}

// FetchFile reads file:// module URLs (absolute or relative paths); it is
// the fetcher of Options without one. Other schemes are refused.
func FetchFile(_ context.Context, uri string) ([]byte, error) {
	path, ok := strings.CutPrefix(uri, "file://")
	if !ok {
		return nil, fmt.Errorf("fetching %s: only file:// modules can be read without a fetcher", uri)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", uri, err)
	}
	return b, nil
}

type nopRecorder struct{}

func (nopRecorder) RecordEvaluation(context.Context, observability.Evaluation, time.Duration) {}
func (nopRecorder) RecordInitializationError(context.Context, string, string)                 {}
