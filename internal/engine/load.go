package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/wasm"
)

// Options configure Load.
type Options struct {
	Runtime  *wasm.Runtime
	Logger   *slog.Logger
	Recorder Recorder

	// DefaultTimeout bounds every evaluation unless a policy sets
	// timeoutEvalSeconds; TimeoutProtection false disables both
	// (docs/compatibility.md#timeouts).
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
// answer every request with their error. The engine is fixed: a server
// that changes its policies uses an Environment.
func Load(ctx context.Context, configs map[string]*PolicyConfig, opts Options) (*Engine, error) {
	env, err := NewEnvironment(opts)
	if err != nil {
		return nil, err
	}
	if err := env.Init(ctx, configs); err != nil {
		return nil, err
	}
	e := env.Engine()
	e.owner = env
	return e, nil
}

// loader builds the policies of one change of an Environment: it fetches
// and compiles their modules, by URI, and releases its own references to
// them when done (the runners built from them hold theirs).
type loader struct {
	opts    Options
	env     *Environment
	modules map[string]*moduleLoad
	// pools are the waPC and WASI pools preparePools built, by key, each
	// held once by the loader; poolErrs why a pool could not be built.
	pools    []string
	poolErrs map[string]error
}

type moduleLoad struct {
	claimed bool
	mod     *wasm.Module
	meta    *metadata.Metadata
	err     error
}

// compileAll fetches and compiles every distinct module of configs, in
// parallel.
func (l *loader) compileAll(ctx context.Context, configs map[string]*PolicyConfig) {
	var loads []func()
	for _, id := range sortedKeys(configs) {
		for _, uri := range configs[id].modules() {
			if ml := l.module(uri); !l.native(uri) && ml.claim() {
				loads = append(loads, func() { ml.load(ctx, uri, l.opts) })
			}
		}
	}
	inParallel(loads)
}

// inParallel runs every job, GOMAXPROCS at a time, and returns once all
// have.
func inParallel(jobs []func()) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, job := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			job()
		})
	}
	wg.Wait()
}

// releaseModules drops the loader's references to the pools it built and
// the modules it compiled.
func (l *loader) releaseModules(ctx context.Context) {
	for _, key := range l.pools {
		l.env.releaseShared(ctx, key)
	}
	for _, ml := range l.modules {
		l.opts.Runtime.Release(ctx, ml.mod)
	}
}

// digest names the module of uri as PolicyStatus does.
func (l *loader) digest(uri string) string {
	if l.native(uri) {
		return "builtin"
	}
	if ml, ok := l.modules[uri]; ok && ml.mod != nil {
		return "sha256:" + ml.mod.Digest
	}
	return ""
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
		ml.err = &stageError{stage: StageFetch, err: err} // it names the module
		return
	}
	meta, err := metadata.FromModule(b)
	switch {
	case errors.Is(err, metadata.ErrMissing):
		meta = &metadata.Metadata{} // Kubewarden's defaults, refused below
	case err != nil: // wasm.ErrNotWasm among others
		ml.err = &stageError{stage: StageCompile, err: fmt.Errorf("module %s: %w", uri, err)}
		return
	}
	if err := meta.ValidateForServer(opts.CompatVersion); err != nil {
		ml.err = &stageError{stage: StageCompile, err: err}
		return
	}
	switch meta.Mode() {
	case metadata.ModeWapc, metadata.ModeWASI:
		ml.mod, err = opts.Runtime.Compile(ctx, b)
	case metadata.ModeOPA, metadata.ModeGatekeeper:
		ml.mod, err = opts.Runtime.CompileOPA(ctx, b)
	default:
		ml.err = &stageError{stage: StageCompile, err: fmt.Errorf("execution mode %s is not supported", meta.Mode())}
		return
	}
	if err != nil {
		ml.err = &stageError{stage: StageCompile, err: fmt.Errorf("module %s: %w", uri, err)}
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
		calls:           newCallQueue(l.opts.Workers),
	}
	if len(p.settings) == 0 || string(p.settings) == "null" {
		p.settings = []byte("{}")
	}
	p.timeout = l.initTimeout(c)
	if l.native(c.Module) {
		run, err := newNativeRunner(c.Module, p.settings, p.host.resources)
		if err != nil {
			return nil, &invalidSettingsError{err.Error()}
		}
		p.run = run
		return p, nil
	}
	initCtx, cancel := context.WithTimeout(ctx, cmp(p.timeout, loadTimeout))
	defer cancel()
	run, release, err := l.runner(initCtx, id, c, ml)
	if err != nil {
		if errors.Is(err, wasm.ErrDeadlineExceeded) {
			return nil, errors.New(msgTimeout)
		}
		return nil, err
	}
	p.run = run
	if err := validatePolicySettings(initCtx, p); err != nil {
		release(ctx)
		return nil, err
	}
	p.release = release
	return p, nil
}

// validatePolicySettings is the step of loading that asks the policy
// whether it accepts its settings (its validate_settings, or the native
// CEL policy's compilation in newCELRunner), as Kubewarden does before
// serving a policy. Their shape (a mapping) was checked when the
// configuration was read (config.go).
func validatePolicySettings(ctx context.Context, p *Policy) error {
	svr := p.run.validateSettings(ctx, p.host, p.settings)
	if svr.Valid {
		return nil
	}
	msg := "no message"
	if svr.Message != nil {
		msg = *svr.Message
	}
	return &invalidSettingsError{msg}
}

// invalidSettingsError is a policy's verdict that its settings are invalid.
type invalidSettingsError struct{ msg string }

func (e *invalidSettingsError) Error() string { return "Policy settings are invalid: " + e.msg }

// LoadStage is the step of loading a policy that failed.
type LoadStage string

// Load stages, in the order a policy goes through them.
const (
	// StageFetch: the module could not be fetched (or its signature
	// verified: the fetcher verifies).
	StageFetch LoadStage = "fetch"
	// StageCompile: the module is not one the server can run.
	StageCompile LoadStage = "compile"
	// StageSettings: the policy refused its settings.
	StageSettings LoadStage = "settings"
	// StageOther: anything else, such as a guest that traps while
	// starting.
	StageOther LoadStage = "other"
)

// stageError marks a load error with the stage that failed; its message is
// the error's.
type stageError struct {
	stage LoadStage
	err   error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// FailedStage returns the stage at which the load that returned err failed.
func FailedStage(err error) LoadStage {
	var se *stageError
	if errors.As(err, &se) {
		return se.stage
	}
	var ie *invalidSettingsError
	if errors.As(err, &ie) {
		return StageSettings
	}
	return StageOther
}

// initTimeout is a policy's time limit per evaluation, which also bounds
// its initialisation and settings validation: zero without timeout
// protection (loadTimeout applies then).
func (l *loader) initTimeout(c *PolicyConfig) time.Duration {
	switch {
	case !l.opts.TimeoutProtection:
		return 0
	case c.TimeoutEvalSeconds != nil:
		return time.Duration(*c.TimeoutEvalSeconds) * time.Second
	default:
		return l.opts.DefaultTimeout
	}
}

// cmp returns a if it is set, else b.
func cmp(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

// runner returns the runner of a module and what releases the policy's
// hold on it. waPC and WASI pools are shared, by module digest, between
// the policies of an Environment that use the same module; each holds a
// reference to the module, given back when the runner closes.
func (l *loader) runner(ctx context.Context, id string, c *PolicyConfig, ml *moduleLoad) (runner, func(context.Context), error) {
	if mode := ml.meta.Mode(); mode == metadata.ModeOPA || mode == metadata.ModeGatekeeper {
		return l.regoRunner(ctx, id, c, ml)
	}
	key := poolKey(ml)
	release := func(ctx context.Context) { l.env.releaseShared(ctx, key) }
	if r := l.env.takeShared(key); r != nil {
		return r, release, nil
	}
	if err, ok := l.poolErrs[key]; ok {
		return nil, nil, err
	}
	r, err := l.newPool(ctx, ml)
	if err != nil {
		return nil, nil, err
	}
	l.env.addShared(key, r)
	return r, release, nil
}

// poolKey names the shared pool of a waPC or WASI module.
func poolKey(ml *moduleLoad) string { return ml.meta.Mode() + "/" + ml.mod.Digest }

// newPool builds the instance pool of a waPC or WASI module: its
// instantiation, the guest's initialisation and the memory snapshot. The
// pool holds a reference to the module.
func (l *loader) newPool(ctx context.Context, ml *moduleLoad) (moduleRunner, error) {
	rt, mod := l.opts.Runtime, ml.mod
	var r runner
	if ml.meta.Mode() == metadata.ModeWASI {
		pool, err := rt.NewWASIPool(ctx, mod, "validate", 2*l.opts.Workers)
		if err != nil {
			return moduleRunner{}, err
		}
		r = wasiRunner{rt: rt, mod: mod, pool: pool, onWarn: l.warnStderr}
	} else {
		w, err := rt.NewWapc(ctx, mod, 2*l.opts.Workers)
		if err != nil {
			return moduleRunner{}, err
		}
		r = wapcRunner{w}
	}
	rt.Retain(mod)
	return moduleRunner{runner: r, rt: rt, mod: mod}, nil
}

// preparePools builds the pools of the distinct waPC and WASI modules of
// configs that the environment does not hold yet, in parallel (GOMAXPROCS
// at a time), before the policies are built one after another: building a
// pool is most of a policy's load once its module is compiled (tens of
// milliseconds for a Go guest), and settings validation is not. Each pool
// is built with the time limit of the first policy (in id order) that uses
// its module, as building the policies in order would; a pool that fails
// is not tried again for the other policies of its module, which fail
// with the same error.
func (l *loader) preparePools(ctx context.Context, configs map[string]*PolicyConfig) {
	type job struct {
		key string
		ml  *moduleLoad
		c   *PolicyConfig
		r   moduleRunner
		err error
	}
	var jobs []*job
	seen := map[string]bool{}
	for _, id := range sortedKeys(configs) {
		for _, c := range configs[id].singles() {
			ml := l.modules[c.Module]
			if l.native(c.Module) || ml == nil || ml.err != nil || ml.mod == nil {
				continue
			}
			if mode := ml.meta.Mode(); mode != metadata.ModeWapc && mode != metadata.ModeWASI {
				continue
			}
			key := poolKey(ml)
			if seen[key] || l.env.hasShared(key) {
				continue
			}
			seen[key] = true
			jobs = append(jobs, &job{key: key, ml: ml, c: c})
		}
	}
	if len(jobs) < 2 {
		return // one pool: built on the way, with no goroutine
	}
	builds := make([]func(), len(jobs))
	for i, j := range jobs {
		builds[i] = func() {
			initCtx, cancel := context.WithTimeout(ctx, cmp(l.initTimeout(j.c), loadTimeout))
			defer cancel()
			j.r, j.err = l.newPool(initCtx, j.ml)
		}
	}
	inParallel(builds)
	l.poolErrs = map[string]error{}
	for _, j := range jobs {
		if j.err != nil {
			l.poolErrs[j.key] = j.err
			continue
		}
		l.env.addShared(j.key, j.r) // the loader's hold, until releaseModules
		l.pools = append(l.pools, j.key)
	}
}

// regoRunner returns a runner of its own to an OPA or Gatekeeper policy:
// its instances hold the policy's data.
func (l *loader) regoRunner(ctx context.Context, id string, c *PolicyConfig, ml *moduleLoad) (runner, func(context.Context), error) {
	logger := l.opts.Logger.With(observability.KeyPolicyID, id)
	kube := newRegoContext(&l.env.inventories, grantedResources(c, ml.meta), ml.meta.Mode(), c.Settings, l.opts.HostCapabilities, logger)
	r, err := newRegoRunner(ctx, l.opts.Runtime, ml.mod, ml.meta.Mode(), c.Settings, kube, l.opts.Workers, logger)
	if err != nil {
		return nil, nil, err
	}
	rt, mod := l.opts.Runtime, ml.mod
	rt.Retain(mod)
	return r, moduleRunner{runner: r, rt: rt, mod: mod}.close, nil
}

// moduleRunner is a runner that holds a reference to its module, released
// after the runner closes.
type moduleRunner struct {
	runner
	rt  *wasm.Runtime
	mod *wasm.Module
}

func (r moduleRunner) close(ctx context.Context) {
	r.runner.close(ctx)
	r.rt.Release(ctx, r.mod)
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
	return uri == NativeCELModule || isKubePolicyModule(uri) || (!l.opts.WasmCELPolicy && isKubewardenCELPolicy(uri))
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
// the fetcher of Options without one. Other schemes are refused, and so are
// files that are not regular (a device such as /dev/zero, a named pipe) or
// are larger than 256 MiB, the bound of policyfetch's downloads.
func FetchFile(_ context.Context, uri string) ([]byte, error) {
	path, ok := strings.CutPrefix(uri, "file://")
	if !ok {
		return nil, fmt.Errorf("fetching %s: only file:// modules can be read without a fetcher", uri)
	}
	b, err := policyfetch.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", uri, err)
	}
	return b, nil
}

type nopRecorder struct{}

func (nopRecorder) RecordEvaluation(context.Context, observability.Evaluation, time.Duration) {}
func (nopRecorder) RecordInitializationError(context.Context, string, string)                 {}
func (nopRecorder) RecordTimeout(context.Context, string)                                     {}
