package wasm

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wardenhq/warden/internal/sharedcache"
)

// Config configures a Runtime. The zero value is usable.
type Config struct {
	// CacheDir, when set, keeps compiled machine code on disk so a restart
	// does not compile the same modules again.
	CacheDir string
	// Shared, with CacheDir, is a cache of compiled code shared with other
	// processes (the replicas of a policy server): a module whose verified
	// code it holds is not compiled again, and code compiled here is
	// stored in it (shared.go).
	Shared *sharedcache.Store
	// MemoryLimitBytes caps the linear memory of every instance; a guest
	// that tries to grow beyond it sees memory.grow fail. Zero means
	// DefaultMemoryLimitBytes.
	MemoryLimitBytes uint64
	// Logger receives guest console output (waPC __console_log). Nil
	// discards it.
	Logger *slog.Logger
	// MaxHostCallBytes caps the payload a guest hands the host in one host
	// call (waPC __host_call, WASI host.call) and in one __console_log: a
	// larger one is refused without being read, and the guest gets a
	// *HostCallTooLargeError's text as the call's error. It caps too the
	// arguments, together, of an OPA module's call of a builtin left to
	// the host: past it the evaluation stops with a
	// *BuiltinArgsTooLargeError. Zero means DefaultMaxHostCallBytes.
	MaxHostCallBytes int
	// MaxResponseBytes caps a guest's answer (waPC __guest_response or
	// __guest_error, WASI stdout): a call whose answer is larger fails
	// with a *ResponseTooLargeError, without the answer being read. Zero
	// means DefaultMaxResponseBytes.
	MaxResponseBytes int
}

// Defaults of the caps on what a guest hands the host.
const (
	DefaultMaxHostCallBytes = 1 << 20
	DefaultMaxResponseBytes = 16 << 20
)

// DefaultMemoryLimitBytes is the memory cap of an instance when
// Config.MemoryLimitBytes is zero.
const DefaultMemoryLimitBytes = 512 << 20

const pageSize = 65536

// Runtime compiles modules and runs them. It is safe for concurrent use. A
// process should have one: see guestSlots.
type Runtime struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	// memRT, once the cache cannot be written (a full or read-only
	// volume), is a runtime without a cache that compiles every module
	// from then on (cachedir.go); nil before. memConfig is its
	// configuration. Both are guarded by codeMu.
	memRT     wazero.Runtime
	memConfig wazero.RuntimeConfig
	memLimit  uint64
	logger    *slog.Logger
	// maxHostCall and maxResponse are Config.MaxHostCallBytes and
	// Config.MaxResponseBytes.
	maxHostCall, maxResponse int
	// giveBack returns memory to the OS after failed calls (giveback.go)
	// and after the release of a module (Release), which sets freeing
	// while it collects first.
	giveBack giveBack
	freeing  atomic.Bool
	// guestSlots bounds the goroutines running guest code at once to
	// GOMAXPROCS-1 (at least 1), as of NewRuntime. The Go scheduler cannot
	// preempt guest machine code, so a free P is what lets the timers that
	// interrupt guests past their deadline run at all. sched.go says who
	// gets them.
	guestSlots *scheduler
	slots      int

	mu       sync.Mutex
	compiled map[string]*compileEntry // by digest of the original bytes

	instances atomic.Int64 // live instances, for LiveInstances

	cacheDir string             // Config.CacheDir
	shared   *sharedcache.Store // nil when none

	codeDir string       // where the files backing machine code go
	code    []codeRegion // the machine code moved into files; guarded by codeMu
}

// codeMu guards Runtime.code and Runtime.memRT, and serialises the
// creation of wazero's machine-code mappings outside compilations (a
// runtime's, its host modules'), so that a compilation that holds it with
// compileMu can tell apart the mappings it creates (codemap_linux.go).
var codeMu sync.Mutex

// compileMu lets compilations run at once, each holding it for reading,
// when their machine code is found from the compiled module (codeaddr.go).
// What must see no compilation under way holds it for writing, then codeMu
// (compileLock): a compilation whose code is found by its mappings, one
// that lists the cache files it adds for a shared cache (shared.go), the
// recovery from a cache wazero cannot read or write (cachedir.go), and
// Close.
var compileMu sync.RWMutex

type compileEntry struct {
	done chan struct{}
	mod  *Module
	err  error
	refs int // Compile calls not yet released; guarded by Runtime.mu
}

// NewRuntime creates a runtime and instantiates the host modules guests
// import: wapc, host, kubewarden:javy/host and wasi_snapshot_preview1.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	limit := cfg.MemoryLimitBytes
	if limit == 0 {
		limit = DefaultMemoryLimitBytes
	}
	pages := limit / pageSize
	if pages == 0 || pages > 65536 {
		return nil, fmt.Errorf("memory limit %d bytes is outside 64 KiB..4 GiB", limit)
	}
	// Deadlines are enforced by the interrupt flag compiled into every
	// module (interrupt.go), not by WithCloseOnContextDone.
	rc := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(uint32(pages)).
		WithCustomSections(false)
	memConfig := rc
	if cfg.Shared != nil && cfg.CacheDir == "" {
		return nil, errors.New("a shared cache needs a cache directory of its own")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The cache only saves compilations: a directory it cannot use is a
	// warning, not a reason to refuse to run (cachedir.go).
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := openCompilationCache(ctx, cfg.CacheDir)
		if err != nil {
			logger.WarnContext(ctx, "compiled modules are not cached: the cache directory is unusable",
				"dir", cfg.CacheDir, "shared_cache", cfg.Shared != nil, "error", err)
			cfg.CacheDir, cfg.Shared = "", nil
		} else {
			cache = c
			rc = rc.WithCompilationCache(c)
		}
	}
	codeDir := cfg.CacheDir
	if codeDir == "" {
		codeDir = os.TempDir()
	}
	slots := max(runtime.GOMAXPROCS(0)-1, 1)
	codeMu.Lock()
	defer codeMu.Unlock()
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	r := &Runtime{
		rt:          rt,
		memConfig:   memConfig,
		codeDir:     codeDir,
		cache:       cache,
		cacheDir:    cfg.CacheDir,
		shared:      cfg.Shared,
		memLimit:    pages * pageSize,
		logger:      logger,
		maxHostCall: cmp.Or(max(cfg.MaxHostCallBytes, 0), DefaultMaxHostCallBytes),
		maxResponse: cmp.Or(max(cfg.MaxResponseBytes, 0), DefaultMaxResponseBytes),
		guestSlots:  newScheduler(slots, runtime.NumCPU()),
		slots:       slots,
		compiled:    map[string]*compileEntry{},
	}
	if err := r.instantiateHostModules(ctx, r.rt); err != nil {
		_ = r.rt.Close(ctx)
		return nil, err
	}
	return r, nil
}

// Close releases every module and instance of the runtime.
func (r *Runtime) Close(ctx context.Context) error {
	// No compilation runs until the runtimes are closed, and then none
	// succeeds: none adds code to r.code once it is cleared.
	compileMu.Lock()
	defer compileMu.Unlock()
	codeMu.Lock()
	r.code = nil
	memRT := r.memRT
	codeMu.Unlock()
	err := r.rt.Close(ctx)
	if memRT != nil {
		err = errors.Join(err, memRT.Close(ctx))
	}
	if r.cache != nil {
		err = errors.Join(err, r.cache.Close(ctx))
	}
	return err
}

// Module is a compiled policy module. It is safe for concurrent use and
// shared by every policy that uses the same bytes.
type Module struct {
	// Digest is the hex sha256 of the module as given to Compile.
	Digest string

	compiled wazero.CompiledModule
	rt       wazero.Runtime // that compiled it, and instantiates it
	exports  map[string]bool
	// globals names the exports added for mutable globals; snapshot is false
	// when the module has globals that cannot be saved and restored.
	globals  []string
	snapshot bool
	// interrupt names the export of the interrupt flag; start reports a
	// former start section, now exported as startExport.
	interrupt string
	budget    string // the export of the loop budget
	start     bool
	code      []codeRegion // its machine code moved into files
	// env is the environment of its instances: GODEBUG=gcstoptheworld=1
	// for a Go module built without write barriers (gobuild.go), else
	// nothing.
	env []string
}

// Exports reports whether the module exports a function with that name.
func (m *Module) Exports(name string) bool { return m.exports[name] }

// Compile compiles module, or returns the module compiled earlier from the
// same bytes. Concurrent calls for the same bytes compile once. Each
// successful call holds a reference to the module until Release; a module
// never released lives as long as the runtime.
func (r *Runtime) Compile(ctx context.Context, module []byte) (*Module, error) {
	sum := sha256.Sum256(module)
	digest := hex.EncodeToString(sum[:])

	r.mu.Lock()
	e, ok := r.compiled[digest]
	if !ok {
		e = &compileEntry{done: make(chan struct{})}
		r.compiled[digest] = e
	}
	e.refs++
	r.mu.Unlock()
	if ok {
		select {
		case <-e.done:
			if e.err != nil {
				return nil, e.err
			}
			return e.mod, nil
		case <-ctx.Done():
			r.mu.Lock()
			e.refs-- // the compiling call holds one: nothing to free
			r.mu.Unlock()
			return nil, ctx.Err()
		}
	}

	e.mod, e.err = r.compile(ctx, module, digest)
	if e.err != nil {
		r.mu.Lock()
		delete(r.compiled, digest) // let a later attempt try again
		r.mu.Unlock()
	}
	close(e.done)
	return e.mod, e.err
}

// compile reads module only until it is instrumented: a module held by
// nothing else is garbage during the compilation proper, which for a large
// module takes the most memory.
func (r *Runtime) compile(ctx context.Context, module []byte, digest string) (*Module, error) {
	var env []string
	if goWithoutWriteBarriers(module) {
		env = []string{goStopTheWorldEnv}
	}
	inst, err := instrument(module)
	if err != nil {
		return nil, fmt.Errorf("reading module: %w", err)
	}
	rewritten, globals, snapshot, err := exportMutableGlobals(inst.module)
	if err != nil {
		return nil, fmt.Errorf("reading module: %w", err)
	}
	cm, rt, code, err := r.compileCode(ctx, digest, rewritten)
	if err != nil {
		return nil, fmt.Errorf("compiling module: %w", err)
	}
	exports := map[string]bool{}
	for name := range cm.ExportedFunctions() {
		exports[name] = true
	}
	return &Module{
		Digest:    digest,
		compiled:  cm,
		rt:        rt,
		exports:   exports,
		globals:   globals,
		snapshot:  snapshot,
		interrupt: inst.interrupt,
		budget:    inst.budget,
		start:     inst.start,
		code:      code,
		env:       env,
	}, nil
}

// compileCode compiles a module with every core, and moves its machine
// code into a file mapping. A module whose code cannot be moved (a
// read-only file system) keeps it in memory.
//
// With a shared cache, the module's code comes from it when it holds
// verified code, and goes to it when compiled here.
func (r *Runtime) compileCode(ctx context.Context, digest string, module []byte) (wazero.CompiledModule, wazero.Runtime, []codeRegion, error) {
	ctx = experimental.WithFunctionListenerFactory(ctx, yieldListeners{})
	ctx = experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0))
	shared := r.shared != nil && !r.inMemory()
	found := shared && r.fromShared(ctx, digest)
	cm, rt, moved, created, err := r.compileLocked(ctx, module)
	if err != nil {
		return nil, nil, nil, err
	}
	if !dropFunctionBodies(cm) {
		r.logger.DebugContext(ctx, "the function bodies of compiled modules stay in memory: wazero's layout is not the expected one")
	}
	if shared && rt == r.rt {
		r.toShared(ctx, digest, created, found)
	}
	return cm, rt, moved, nil
}

// compileLocked compiles with the runtime that compiles now (the one with
// the cache, or the in-memory one once the cache cannot be written), which
// it returns, moves the module's machine code into files, and returns the
// files the compilation added to wazero's cache when there is a shared
// cache. Compilations run at once when their code is found from the
// compiled module; otherwise, or with a shared cache, one at a time
// (compileMu).
func (r *Runtime) compileLocked(ctx context.Context, module []byte) (wazero.CompiledModule, wazero.Runtime, []codeRegion, []string, error) {
	byAddress := codeFoundByAddress(ctx, r.rt)
	defer sameBytes.lock(module)()
	lock := compileLock{serial: r.shared != nil || !byAddress}
	lock.lock()
	defer lock.unlock()
	var rt wazero.Runtime
	lock.withCodeMu(func() {
		rt = r.rt
		if r.memRT != nil {
			rt = r.memRT
		}
	})
	var before map[string]bool
	if r.shared != nil && rt == r.rt {
		before = r.cacheFiles()
	}
	var mapper *codeMapper
	if !byAddress {
		mapper = newCodeMapper()
	}
	cm, err := compileModule(ctx, rt, module)
	if err != nil && rt == r.rt && r.isCacheReadError(err) {
		// A cache entry wazero cannot read: empty the cache and compile
		// again (cachedir.go).
		r.logger.WarnContext(ctx, "the compilation cache failed: emptying it and compiling again", "dir", r.cacheDir, "error", err)
		lock.alone(func() { r.emptyCache(ctx) })
		cm, err = compileModule(ctx, rt, module)
	}
	if err != nil && rt == r.rt && r.isCacheWriteError(err) {
		// The cache cannot be written (a full volume): compile in memory,
		// this module and every later one (cachedir.go).
		r.logger.WarnContext(ctx, "the compilation cache cannot be written: compiling in memory from now on",
			"dir", r.cacheDir, "error", err)
		lock.alone(func() { rt, err = r.inMemoryLocked(ctx) })
		if err == nil {
			if !byAddress {
				mapper = newCodeMapper()
			}
			cm, err = compileModule(ctx, rt, module)
		}
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var moved []codeRegion
	if byAddress {
		moved, err = r.moveModuleCode(ctx, cm)
	} else {
		moved, err = mapper.moved(r.codeDir)
	}
	lock.withCodeMu(func() { r.code = append(r.code, moved...) })
	if err != nil {
		r.logger.WarnContext(ctx, "machine code stays in anonymous memory", "dir", r.codeDir, "error", err)
	}
	var created []string
	if before != nil {
		created = r.newCacheFiles(before)
	}
	return cm, rt, moved, created, nil
}

// moveModuleCode moves the machine code of cm, found from cm itself
// (codeaddr.go), into files. Code that other compiled modules share stays
// where it is; so does the code of a module moduleCode cannot read, and
// later compilations find theirs by its mappings.
func (r *Runtime) moveModuleCode(ctx context.Context, cm wazero.CompiledModule) ([]codeRegion, error) {
	code, fresh, ok := moduleCode(cm)
	if !ok {
		codeNotFoundByAddress()
		r.logger.WarnContext(ctx, "the machine code of a module stays in anonymous memory: wazero's layout is not the expected one")
		return nil, nil
	}
	if !fresh {
		return nil, nil
	}
	return moveRegions(r.codeDir, code)
}

// sameBytes makes compilations of the same bytes (modules that differ only
// in custom sections, such as their metadata, which instrument drops) run
// one after the other: the later ones find the module in wazero's engine
// instead of each compiling it, or reading it from the cache, again.
var sameBytes keyedMutex

// keyedMutex holds a mutex for each hash of the bytes locked. Two inputs
// with the same hash only wait for each other. The zero value is ready.
type keyedMutex struct {
	mu   sync.Mutex
	seed maphash.Seed
	held map[uint64]*keyedEntry
}

type keyedEntry struct {
	sync.Mutex
	users int // holders and waiters; guarded by keyedMutex.mu
}

// lock locks b's mutex, and returns what unlocks it.
func (k *keyedMutex) lock(b []byte) (unlock func()) {
	k.mu.Lock()
	if k.held == nil {
		k.seed, k.held = maphash.MakeSeed(), map[uint64]*keyedEntry{}
	}
	key := maphash.Bytes(k.seed, b)
	e := k.held[key]
	if e == nil {
		e = &keyedEntry{}
		k.held[key] = e
	}
	e.users++
	k.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		if e.users--; e.users == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}

// compileModule compiles module with rt. A compilation that wazero does
// not find in its cache compiles machine code on every core
// (WithCompilationWorkers), and holds hundreds of MiB of heap meanwhile:
// one runs at a time (coldCompiles). Starting with an empty cache, two at
// once took longer, and the process peaked at 800 MiB instead of 300.
func compileModule(ctx context.Context, rt wazero.Runtime, module []byte) (wazero.CompiledModule, error) {
	g := &coldGate{Context: ctx}
	defer g.release()
	return rt.CompileModule(g, module)
}

// coldCompiles is held by the compilation that compiles machine code.
var coldCompiles = make(chan struct{}, 1)

// workersKey is the context key of WithCompilationWorkers, which wazero
// looks up only when it compiles machine code, not when it finds it in its
// cache.
var workersKey = func() any {
	rec := &keyRecorder{Context: context.Background()}
	experimental.GetCompilationWorkers(rec)
	return rec.key
}()

// keyRecorder records the key of the last value looked up in it.
type keyRecorder struct {
	context.Context
	key any
}

func (r *keyRecorder) Value(key any) any {
	r.key = key
	return nil
}

// coldGate is the context of one CompileModule call: when wazero looks up
// its compilation workers, about to compile machine code, it waits for
// coldCompiles (or for the context to be done).
type coldGate struct {
	context.Context
	held bool // only the goroutine that calls CompileModule looks workersKey up
}

func (g *coldGate) Value(key any) any {
	if key == workersKey && !g.held {
		select {
		case coldCompiles <- struct{}{}:
			g.held = true
		case <-g.Done():
		}
	}
	return g.Context.Value(key)
}

// release lets another compilation compile machine code.
func (g *coldGate) release() {
	if g.held {
		<-coldCompiles
		g.held = false
	}
}

// compileLock is compileMu and codeMu as one compilation holds them:
// compileMu for reading, or, for a serial compilation, both for the whole
// compilation.
type compileLock struct{ serial bool }

func (l compileLock) lock() {
	if !l.serial {
		compileMu.RLock()
		return
	}
	compileMu.Lock()
	codeMu.Lock()
}

func (l compileLock) unlock() {
	if !l.serial {
		compileMu.RUnlock()
		return
	}
	codeMu.Unlock()
	compileMu.Unlock()
}

// alone runs f with no other compilation under way and codeMu held.
func (l compileLock) alone(f func()) {
	if !l.serial {
		l.unlock()
		defer l.lock()
		serial := compileLock{serial: true}
		serial.lock()
		defer serial.unlock()
	}
	f()
}

// withCodeMu runs f with codeMu held.
func (l compileLock) withCodeMu(f func()) {
	if !l.serial {
		codeMu.Lock()
		defer codeMu.Unlock()
	}
	f()
}

// Retain adds a reference to a module that Compile returned and that is
// not yet freed, for a holder that will Release it.
func (r *Runtime) Retain(m *Module) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.compiled[m.Digest]; ok && e.mod == m {
		e.refs++
	}
}

// Release drops a reference that Compile or Retain returned. When the last one goes,
// the module is freed: its machine code, and its place in the runtime, so
// that compiling the same bytes again compiles them anew (from the disk
// cache, when there is one). Instances and pools of the module must be
// closed first. Releasing nil does nothing.
func (r *Runtime) Release(ctx context.Context, m *Module) {
	if m == nil {
		return
	}
	r.mu.Lock()
	e, ok := r.compiled[m.Digest]
	if !ok || e.mod != m {
		r.mu.Unlock()
		return
	}
	if e.refs--; e.refs > 0 {
		r.mu.Unlock()
		return
	}
	delete(r.compiled, m.Digest)
	r.mu.Unlock()
	// Forget the module's code regions before wazero may unmap them: once
	// unmapped, their addresses can be reused by memory ReleaseCode must
	// never touch.
	codeMu.Lock()
	r.code = slices.DeleteFunc(r.code, func(c codeRegion) bool { return slices.Contains(m.code, c) })
	codeMu.Unlock()
	_ = m.compiled.Close(ctx)
	// A large module leaves hundreds of MiB of heap behind (its decoded,
	// rewritten and compiled copies). wazero unmaps its machine code in a
	// finalizer, once a collection has found the module unreachable, and
	// what the module held is free only at the collection after that:
	// collect now, then have the free pages returned (giveback.go), rather
	// than wait for the scavenger. Not on the caller's goroutine, which
	// may be a request's, and once for the modules released meanwhile
	// (a reload that swaps many): one released while the collection runs
	// is freed by the give-back's own.
	if r.freeing.CompareAndSwap(false, true) {
		go func() {
			runtime.GC()
			r.freeing.Store(false)
			r.giveBack.request()
		}()
	}
}

// CompiledModules is the number of modules the runtime holds compiled. It
// exists for tests and metrics that check modules are freed.
func (r *Runtime) CompiledModules() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.compiled)
}

// LiveInstances is the number of module instances not yet closed, of every
// kind (waPC, WASI, OPA, pooled or not). It exists for tests and metrics
// that check instances are released.
func (r *Runtime) LiveInstances() int64 { return r.instances.Load() }

// instantiate instantiates m, counting the instance until closeInstance.
func (r *Runtime) instantiate(ctx context.Context, m *Module, cfg wazero.ModuleConfig) (api.Module, error) {
	mod, err := m.rt.InstantiateModule(ctx, m.compiled, cfg)
	if err == nil {
		r.instances.Add(1)
	}
	return mod, err
}

// closeInstance closes an instance that instantiate created.
func (r *Runtime) closeInstance(ctx context.Context, mod api.Module) {
	_ = mod.Close(ctx)
	r.instances.Add(-1)
}

// ReleaseCode drops the pages of machine code that are not running from
// the process's resident set, the guests' and the server's own text and
// read-only data (selfmap_linux.go); the code that runs next reads its
// pages back from the page cache. Call it after a burst of work that ran
// code requests will not run again, such as loading policies (guest
// initialisation).
func (r *Runtime) ReleaseCode() {
	codeMu.Lock()
	defer codeMu.Unlock()
	releaseRegions(r.code)
	releaseOwnFileMappings()
}

// ErrDeadlineExceeded is returned when a guest call runs past its deadline.
// The text is the one wapc-rs uses for an epoch interruption.
var ErrDeadlineExceeded = errors.New("guest code interrupted, execution deadline exceeded")

// ExitError reports a guest that called proc_exit with a non-zero code.
type ExitError struct {
	Code   uint32
	Stderr string // what the guest wrote on stderr, trimmed
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("guest exited with code %d: %s", e.Code, summarize(e.Stderr))
	}
	return fmt.Sprintf("guest exited with code %d", e.Code)
}

// Message is the guest's stderr as an error message: its first line alone
// when there are more (a Go guest that panics or runs out of memory writes
// the stacks of its goroutines after it, kilobytes nobody reads in an
// admission response; Stderr keeps them).
func (e *ExitError) Message() string { return summarize(e.Stderr) }

// summarize returns the first line of a guest's stderr, saying so when
// there is more.
func summarize(stderr string) string {
	first, rest, more := strings.Cut(stderr, "\n")
	if !more || strings.TrimSpace(rest) == "" {
		return stderr
	}
	return first + " [the rest of the guest's stderr is in the debug log]"
}

// Stderr returns everything the guest wrote on stderr before the failure
// err reports, or "" when err is not a guest's failure.
func Stderr(err error) string {
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Stderr
	}
	var trap *TrapError
	if errors.As(err, &trap) {
		return trap.Stderr
	}
	return ""
}

// exitPanic is what our proc_exit panics with. Unlike wazero's own proc_exit
// it does not close the module, so an init function that exits with 0 (TinyGo
// `_start`) leaves a usable instance.
type exitPanic struct{ code uint32 }

func (e *exitPanic) Error() string { return fmt.Sprintf("proc_exit(%d)", e.code) }

// callError turns an error from a guest call into one of the package's
// errors. interrupted reports that the interrupt flag stopped the call.
func callError(ctx context.Context, err error, stderr string, interrupted bool) error {
	if err == nil {
		return nil
	}
	// A host call abandoned at the deadline ends the call before the
	// guard may have set the flag: context.AfterFunc runs its function on
	// a goroutine of its own, which a loaded machine starts late.
	if interrupted || errors.Is(err, errHostCallAbandoned) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ErrDeadlineExceeded
		}
		return fmt.Errorf("guest call interrupted: %w", context.Cause(ctx))
	}
	var exit *exitPanic
	if errors.As(err, &exit) {
		return &ExitError{Code: exit.code, Stderr: stderr}
	}
	var sysExit *sys.ExitError
	if errors.As(err, &sysExit) {
		return &ExitError{Code: sysExit.ExitCode(), Stderr: stderr}
	}
	return &TrapError{Stderr: stderr, err: err}
}

// TrapError reports a guest call that failed inside the guest: a trap, or a
// host function that refused the guest's arguments.
type TrapError struct {
	Stderr string // what the guest wrote on stderr, trimmed
	err    error
}

// Error returns the first line of the failure (wazero appends the wasm stack
// trace; Unwrap keeps it) and the guest's stderr.
func (e *TrapError) Error() string {
	msg := e.err.Error()
	if i := strings.Index(msg, "\nwasm stack trace:"); i >= 0 {
		msg = msg[:i]
	}
	if e.Stderr != "" {
		msg += " (guest stderr: " + summarize(e.Stderr) + ")"
	}
	return msg
}

// Unwrap returns the full error.
func (e *TrapError) Unwrap() error { return e.err }

// moduleConfig is the configuration of every instance of m: the given
// arguments, m.env as the environment (none but for a Go module built
// without write barriers), no files, real clocks and randomness, and stdio
// wired to the instance's sink.
func moduleConfig(m *Module, sink *stdio, args ...string) wazero.ModuleConfig {
	cfg := wazero.NewModuleConfig()
	for _, kv := range m.env {
		k, v, _ := strings.Cut(kv, "=")
		cfg = cfg.WithEnv(k, v)
	}
	return cfg.
		WithName("").
		WithStartFunctions().
		WithArgs(args...).
		WithStdin(sink.stdinReader()).
		WithStdout(sink.stdoutWriter()).
		WithStderr(sink.stderrWriter()).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader)
}

// GuestSlots is how many guest calls the runtime runs at once.
func (r *Runtime) GuestSlots() int { return r.slots }

// enterGuest waits for a guest slot; the returned function gives it back.
// The call must run its guest code with the returned context, which
// carries the slot to its yield points and host calls.
func (r *Runtime) enterGuest(ctx context.Context) (context.Context, func(), error) {
	ctx, sl, err := r.guestSlots.enter(ctx)
	if err != nil {
		return ctx, nil, err
	}
	return ctx, sl.leave, nil
}

// interruptible is a guest instance whose interrupt flag a deadline sets.
type interruptible struct {
	flag   api.MutableGlobal
	budget api.MutableGlobal
	// setting counts the deadline function of the current guard while it
	// may still run: done waits on it before anyone touches the globals.
	setting sync.WaitGroup
	set     bool
}

// bind finds the interrupt flag and the loop budget of mod, an instance of m.
func (it *interruptible) bind(mod api.Module, m *Module) error {
	it.flag, _ = mod.ExportedGlobal(m.interrupt).(api.MutableGlobal)
	it.budget, _ = mod.ExportedGlobal(m.budget).(api.MutableGlobal)
	if it.flag == nil || it.budget == nil {
		return errors.New("the interrupt flag is missing")
	}
	return nil
}

// guard arranges for the flag to be set when ctx is done, and returns a
// function to call once the guest call has returned: it cancels the
// arrangement, waits for a setting already under way to finish (the
// instance's globals are restored right after), and reports whether the
// flag was set.
func (it *interruptible) guard(ctx context.Context) (done func() (interrupted bool)) {
	if ctx.Done() == nil {
		return func() bool { return false }
	}
	it.setting.Add(1)
	stop := context.AfterFunc(ctx, func() {
		defer it.setting.Done()
		it.flag.Set(1)
		it.budget.Set(1) // the next loop head looks at the flag
		it.set = true
	})
	return func() bool {
		if stop() {
			it.setting.Done() // the function will not run
		}
		it.setting.Wait()
		set := it.set
		it.set = false
		return set
	}
}
