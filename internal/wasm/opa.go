package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// OPA's WebAssembly ABI (docs/compatibility.md#opa-mode), for modules built by
// `opa build -t wasm`.
//
// Such a module imports its memory (env.memory) and its host functions (the
// rest of env). wazero's host modules cannot export a memory, so CompileOPA
// rewrites the module to define that memory itself; the host reads it
// through the instance. The host functions live in one host module, env,
// instantiated once per Runtime; what they need for the evaluation at hand
// travels in the call's context, as for waPC.
//
// Data: an instance parses a data document (OPAData) once and remembers the
// heap pointer right after it; evaluations with the same document reuse it.
// Given another document (the cluster changed), the instance sets the heap
// pointer back to where it was before any data, parses the new document
// there and remembers the new mark. When an evaluation needs an instance of
// a document that busy instances hold already, the next of them to be put
// back becomes, once its evaluation is answered, the snapshot (opaSnapshot)
// that later instances for that document start from: they map it
// copy-on-write rather than parse the document, instances that parsed it
// meanwhile are put on it, and an idle instance of an older document is
// dropped for one made from it. So a large inventory read by several
// instances at once is parsed a few times and held about once, and a
// policy evaluated one request at a time takes no snapshot. An evaluation
// that finds the instance being remembered waits for it rather than parse
// the document again.
//
// Isolation: every evaluation starts by setting the heap pointer back to the
// mark after the data, which drops whatever the previous evaluation
// allocated (OPA's own SDKs do the same). An instance whose evaluation
// failed or timed out is thrown away; one whose memory grew is kept within
// the bound of keepGrown, measured from the mark after its data.
//
// Memory: instances live on the package's mmap-backed linear memory
// (snapshot_linux.go), so that growing it never moves or copies it, and an
// instance made from a snapshot shares its pages until it writes them.

// Names and limits of the OPA ABI.
const (
	opaEnvModule  = "env"
	opaMemory     = "memory"
	opaMinPages   = 5 // what Kubewarden's host gives env.memory
	opaEntrypoint = 0 // Kubewarden evaluates the first entrypoint (-e) only
	opaABIVersion = 1
)

// The exports of an OPA module that the host calls.
const (
	fnMalloc = iota
	fnJSONParse
	fnJSONDump
	fnValueParse
	fnValueDump
	fnHeapGet
	fnHeapSet
	fnCtxNew
	fnCtxSetInput
	fnCtxSetData
	fnCtxSetEntrypoint
	fnEval
	fnCtxGetResult
	fnBuiltins
	fnEntrypoints
	opaFuncCount
)

var opaExports = [opaFuncCount]string{
	fnMalloc:           "opa_malloc",
	fnJSONParse:        "opa_json_parse",
	fnJSONDump:         "opa_json_dump",
	fnValueParse:       "opa_value_parse",
	fnValueDump:        "opa_value_dump",
	fnHeapGet:          "opa_heap_ptr_get",
	fnHeapSet:          "opa_heap_ptr_set",
	fnCtxNew:           "opa_eval_ctx_new",
	fnCtxSetInput:      "opa_eval_ctx_set_input",
	fnCtxSetData:       "opa_eval_ctx_set_data",
	fnCtxSetEntrypoint: "opa_eval_ctx_set_entrypoint",
	fnEval:             "eval",
	fnCtxGetResult:     "opa_eval_ctx_get_result",
	fnBuiltins:         "builtins",
	fnEntrypoints:      "entrypoints",
}

// CompileOPA compiles a module built by `opa build -t wasm`, or returns the
// module compiled earlier from the same bytes. Its imported env.memory
// becomes a memory it defines, of at least 5 pages or the import's minimum,
// and at most the import's maximum and the runtime's memory limit. It is
// safe for concurrent use.
func (r *Runtime) CompileOPA(ctx context.Context, module []byte) (*Module, error) {
	b, found, err := defineImportedMemory(module, opaEnvModule, opaMemory, opaMinPages, uint32(r.memLimit/pageSize))
	if err != nil {
		return nil, fmt.Errorf("reading module: %w", err)
	}
	if !found {
		return nil, errors.New("the module does not import env.memory: it is not an OPA module")
	}
	if err := r.instantiateOPAHost(ctx); err != nil {
		return nil, fmt.Errorf("instantiating the OPA host functions: %w", err)
	}
	return r.Compile(ctx, b)
}

// OPABuiltinFunc runs, for one evaluation, a builtin that an OPA module
// leaves to its host (one of OPA.Builtins). The arguments and the result are
// Rego values in OPA's text form, as opa_value_dump writes and
// opa_value_parse reads them (JSON, plus sets); a nil result is undefined.
// An error stops the evaluation, and Eval returns it.
type OPABuiltinFunc func(name string, args [][]byte) ([]byte, error)

// OPAData is a data document for OPA evaluations, with an identity: an
// instance parses a document once, and keeps it for every evaluation given
// the same OPAData. NewOPAData makes one; the zero value stands for the data
// NewOPA was given. It is a small value, to copy freely.
type OPAData struct {
	id   uint64
	json []byte
}

var opaDataIDs atomic.Uint64

// NewOPAData returns doc, a JSON document, as data with an identity of its
// own. doc must not change afterwards. Make a new OPAData only when the
// document changes: every new one is parsed again by every instance it
// reaches.
func NewOPAData(doc []byte) OPAData {
	return OPAData{id: opaDataIDs.Add(1), json: doc}
}

// ID identifies d: two OPAData with the same ID hold the same document. The
// zero value's is 0; those of NewOPAData increase with each call.
func (d OPAData) ID() uint64 { return d.id }

// JSON returns the document.
func (d OPAData) JSON() []byte { return d.json }

// OPA evaluates the first entrypoint of a module compiled by CompileOPA. It
// is safe for concurrent use; each evaluation runs on an instance of its
// own.
type OPA struct {
	r        *Runtime
	mod      *Module
	data     OPAData          // the data of NewOPA
	builtins map[int32]string // the builtins left to the host, by id

	idle  idleSet[*opaInstance]
	loads atomic.Int64 // data documents parsed, for DataLoads

	mu     sync.Mutex
	snap   *opaSnapshot // of the newest document an instance loaded; nil before
	closed bool
	// loaded is the newest document an instance loaded; wanted, a document
	// an evaluation needed one more instance for while others held it.
	loaded, wanted uint64
	// snapshotting counts the instances being remembered after their
	// evaluation (put); Close waits for them. pending holds, by document,
	// a channel closed once the instance is remembered and kept.
	snapshotting sync.WaitGroup
	pending      map[uint64]chan struct{}
}

// opaSnapshot is the memory and globals of an instance with a data
// document loaded. A new instance for that document starts from it instead
// of parsing the document again, and shares its pages until it writes
// them (snapshot_linux.go): N instances reading a large inventory hold
// about one parsed copy, not N.
type opaSnapshot struct {
	dataID  uint64
	mem     *memSnapshot
	pages   uint32   // memory size, in wasm pages
	globals []uint64 // values of the module's globals
	// The instance's addresses: the heap before any data, the data's
	// value, the heap after it.
	base, data, heap uint64
}

// opaInstance is one instance of an OPA module with a data document loaded.
// It is used by one goroutine at a time.
type opaInstance struct {
	guestState
	r      *Runtime
	mod    api.Module
	fn     [opaFuncCount]api.Function
	base   uint64 // heap pointer before any data
	dataID uint64 // the OPAData loaded, 0 before the first
	data   uint64 // address of its value
	heap   uint64 // heap pointer right after it
}

// NewOPA prepares m for evaluations with data, a JSON document it keeps as
// the data of Eval: it instantiates m once, under ctx's deadline, to read
// which builtins it leaves to the host, check it has entrypoint 0 and parse
// data. maxIdle bounds the instances kept between evaluations.
func (r *Runtime) NewOPA(ctx context.Context, m *Module, data []byte, maxIdle int) (*OPA, error) {
	if len(m.compiled.ImportedMemories()) > 0 {
		return nil, errors.New("the module imports its memory: compile it with CompileOPA")
	}
	if err := r.instantiateOPAHost(ctx); err != nil {
		return nil, fmt.Errorf("instantiating the OPA host functions: %w", err)
	}
	o := &OPA{r: r, mod: m, data: NewOPAData(data), idle: newIdleSet[*opaInstance](max(maxIdle, 1))}
	ctx, leave, err := r.enterGuest(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	in, err := o.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	if err := o.inspect(ctx, in); err != nil {
		in.close(ctx)
		return nil, err
	}
	if err := o.load(ctx, in, o.data); err != nil {
		in.close(ctx)
		return nil, err
	}
	o.idle.keep(in)
	return o, nil
}

// inspect reads the module's ABI version, builtins and entrypoints.
func (o *OPA) inspect(ctx context.Context, in *opaInstance) error {
	if g := in.mod.ExportedGlobal("opa_wasm_abi_version"); g == nil || int32(g.Get()) != opaABIVersion {
		return errors.New("the module does not use version 1 of OPA's wasm ABI")
	}
	c := &opaCaller{in: in, ctx: ctx}
	done := in.guard(ctx)
	builtins := c.json(c.call(fnBuiltins))
	entrypoints := c.json(c.call(fnEntrypoints))
	if err := c.result(ctx, nil, done()); err != nil {
		return fmt.Errorf("reading the module's builtins and entrypoints: %w", err)
	}
	var byName, eps map[string]int32
	if err := json.Unmarshal(builtins, &byName); err != nil {
		return fmt.Errorf("reading the module's builtins: %w", err)
	}
	if err := json.Unmarshal(entrypoints, &eps); err != nil {
		return fmt.Errorf("reading the module's entrypoints: %w", err)
	}
	o.builtins = make(map[int32]string, len(byName))
	for name, id := range byName {
		o.builtins[id] = name
	}
	for _, id := range eps {
		if id == opaEntrypoint {
			return nil
		}
	}
	return fmt.Errorf("the module has no entrypoint %d", opaEntrypoint)
}

// Builtins returns the names of the builtins the module leaves to its host,
// sorted.
func (o *OPA) Builtins() []string {
	names := make([]string, 0, len(o.builtins))
	for _, name := range o.builtins {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// newInstance instantiates the module on memory of our own, a
// copy-on-write mapping of snap when given, and finds its exports.
func (o *OPA) newInstance(ctx context.Context, snap *memSnapshot) (*opaInstance, error) {
	in := &opaInstance{r: o.r}
	var memErr error
	mod, err := o.r.instantiate(in.withMemory(ctx, snap, &memErr), o.mod, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		if memErr != nil {
			return nil, memErr
		}
		return nil, fmt.Errorf("instantiating module: %w", callError(ctx, err, "", false))
	}
	in.mod = mod
	if err := in.bind(mod, o.mod); err != nil {
		in.close(ctx)
		return nil, err
	}
	for i, name := range opaExports {
		if in.fn[i] = mod.ExportedFunction(name); in.fn[i] == nil {
			in.close(ctx)
			return nil, fmt.Errorf("the module does not export %s: it is not an OPA module", name)
		}
	}
	return in, nil
}

// instantiate creates an instance without data.
func (o *OPA) instantiate(ctx context.Context) (*opaInstance, error) {
	in, err := o.newInstance(ctx, nil)
	if err != nil {
		return nil, err
	}
	c := &opaCaller{in: in, ctx: ctx}
	done := in.guard(ctx)
	if o.mod.start {
		if _, c.err = in.mod.ExportedFunction(startExport).Call(ctx); c.err != nil {
			c.err = fmt.Errorf("start function: %w", c.err)
		}
	}
	c.call(fnMalloc, 0) // sets the heap up, as OPA's SDK does
	in.base = c.call(fnHeapGet)
	if err := c.result(ctx, nil, done()); err != nil {
		in.close(ctx)
		return nil, fmt.Errorf("instantiating module: %w", err)
	}
	return in, nil
}

// load parses data into in, in place of the data it had: the heap is set
// back to where it was before any data, so nothing of the old document, nor
// of the evaluations that read it, stays reachable. An instance whose load
// failed must be closed.
func (o *OPA) load(ctx context.Context, in *opaInstance, data OPAData) error {
	o.loads.Add(1)
	c := &opaCaller{in: in, ctx: ctx}
	done := in.guard(ctx)
	c.call(fnHeapSet, in.base)
	addr := c.value(fnJSONParse, data.json, "data")
	heap := c.call(fnHeapGet)
	if err := c.result(ctx, nil, done()); err != nil {
		return fmt.Errorf("loading the policy data: %w", err)
	}
	in.dataID, in.data, in.heap = data.id, addr, heap
	o.mu.Lock()
	o.loaded = max(o.loaded, data.id)
	o.mu.Unlock()
	return nil
}

// want notes that an evaluation of the document dataID needs an instance
// while the instances that loaded it are busy: the next of them to be put
// back is remembered (startSnapshot), so that further instances start from
// it rather than parse the document. A policy evaluated one request at a
// time never needs one, and pays for no snapshot.
func (o *OPA) want(dataID uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.loaded == dataID {
		o.wanted = dataID
	}
}

// remember makes the state of in the snapshot new instances for its
// document start from, unless the snapshot is of that document or a newer
// one already. in has evaluated since it loaded the document, which left
// nothing below the heap mark after the data that the next evaluation
// would not meet on in itself. Taking the snapshot maps in's memory onto
// it, copy-on-write.
func (o *OPA) remember(in *opaInstance) error {
	size := in.mod.Memory().Size()
	mem, err := takeSnapshot(in.mem, int(size))
	if err != nil {
		return err
	}
	s := &opaSnapshot{dataID: in.dataID, mem: mem, pages: size / pageSize, globals: in.saveGlobals(o.mod),
		base: in.base, data: in.data, heap: in.heap}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.newer(in.dataID) {
		// o was closed, or a newer document remembered, meanwhile; in
		// keeps its mapping of the snapshot it took.
		mem.release()
		return nil
	}
	if o.snap != nil {
		// Instances mapping the old snapshot keep their mappings.
		o.snap.mem.release()
	}
	o.snap = s
	return nil
}

// newer reports whether the document dataID is newer than the snapshot's,
// or there is none, while o is open. o.mu must be held.
func (o *OPA) newer(dataID uint64) bool {
	return !o.closed && (o.snap == nil || o.snap.dataID < dataID)
}

// startSnapshot returns nil unless an instance of the document dataID is
// to be remembered (wanted, and newer than the snapshot while o is open)
// and none is being remembered yet.
// Then it counts the instance in snapshotting, under the lock Close takes
// to stop new ones, marks the document pending, and returns the function
// to call once the instance is remembered and kept (or dropped).
func (o *OPA) startSnapshot(dataID uint64) (remembered func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wanted != dataID || !o.newer(dataID) || o.pending[dataID] != nil {
		return nil
	}
	o.snapshotting.Add(1)
	if o.pending == nil {
		o.pending = map[uint64]chan struct{}{}
	}
	done := make(chan struct{})
	o.pending[dataID] = done
	return func() {
		o.mu.Lock()
		delete(o.pending, dataID)
		o.mu.Unlock()
		close(done)
	}
}

// pendingSnapshot returns a channel closed once the instance of the
// document dataID being remembered is kept, or nil when none is.
func (o *OPA) pendingSnapshot(dataID uint64) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pending[dataID]
}

// snapshotOf returns the snapshot of the document dataID, or nil.
func (o *OPA) snapshotOf(dataID uint64) *opaSnapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.snap != nil && o.snap.dataID == dataID {
		return o.snap
	}
	return nil
}

// fromSnapshot creates an instance in the state of s: its document loaded,
// nothing parsed.
func (o *OPA) fromSnapshot(ctx context.Context, s *opaSnapshot) (*opaInstance, error) {
	in, err := o.newInstance(ctx, s.mem)
	if err != nil {
		return nil, err
	}
	// Instantiation wrote the data segments; the snapshot replaces them.
	if err := rebase(in, s); err != nil {
		in.close(ctx)
		return nil, err
	}
	return in, nil
}

// rebase puts in in the state of s: its memory becomes a mapping of the
// snapshot, with the snapshot's globals and addresses. For an instance that
// parsed the document of s itself before s was taken, this drops its
// private copy of the document.
func rebase(in *opaInstance, s *opaSnapshot) error {
	in.mem.snap = s.mem
	if err := in.startFrom(in.mod, s.pages, s.globals); err != nil {
		return err
	}
	in.base, in.dataID, in.data, in.heap = s.base, s.dataID, s.data, s.heap
	return nil
}

// DataLoads is how many times the instances have loaded a data document,
// NewOPA's included. It exists for tests and metrics that check a document
// is parsed once per instance and version.
func (o *OPA) DataLoads() int64 { return o.loads.Load() }

func (in *opaInstance) close(ctx context.Context) { in.r.closeInstance(ctx, in.mod) }

// Eval evaluates entrypoint 0 with input (a JSON document) and the data
// NewOPA was given, and returns the result set as JSON, `[{"result": ...}]`,
// or `[]` when it is undefined. builtins runs the builtins the module leaves
// to the host. The evaluation is bounded by ctx: past its deadline the
// instance is stopped and ErrDeadlineExceeded returned.
func (o *OPA) Eval(ctx context.Context, input []byte, builtins OPABuiltinFunc) ([]byte, error) {
	return o.EvalWithData(ctx, input, OPAData{}, builtins)
}

// EvalWithData is Eval with data in place of the data NewOPA was given (the
// zero OPAData: that data). The evaluation runs on an instance that holds
// data already when one is idle; otherwise the instance parses it first, the
// same cost as NewOPA's, and keeps it for later evaluations. Loading the
// data is bounded by dataLoadTimeout, not by ctx (see get), and fails with
// "loading the policy data".
func (o *OPA) EvalWithData(ctx context.Context, input []byte, data OPAData, builtins OPABuiltinFunc) ([]byte, error) {
	if data.id == 0 {
		data = o.data
	}
	ctx, leave, err := o.r.enterGuest(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	in, err := o.get(ctx, data)
	if err != nil {
		return nil, err
	}
	st := &opaCall{in: in, names: o.builtins, run: builtins}
	c := &opaCaller{in: in, ctx: context.WithValue(ctx, opaCallKey{}, st)}
	done := in.guard(ctx)
	c.call(fnHeapSet, in.heap)
	inputAddr := c.value(fnJSONParse, input, "input")
	ec := c.call(fnCtxNew)
	c.call(fnCtxSetInput, ec, inputAddr)
	c.call(fnCtxSetData, ec, in.data)
	c.call(fnCtxSetEntrypoint, ec, opaEntrypoint)
	c.call(fnEval, ec)
	out := c.jsonMax(c.call(fnCtxGetResult, ec), o.r.maxResponse)
	if err := c.result(ctx, st, done()); err != nil {
		in.close(ctx)
		return nil, err
	}
	o.put(ctx, in)
	return out, nil
}

// get returns an instance with data loaded: an idle one that holds it, or
// else an idle one that loads it, or else a new one.
func (o *OPA) get(ctx context.Context, data OPAData) (*opaInstance, error) {
	holds := func(in *opaInstance) bool { return in.dataID == data.id }
	in, ok := o.idle.take(holds)
	if wait := o.pendingSnapshot(data.id); wait != nil && (!ok || !holds(in)) {
		// An instance that holds the document is being remembered: it
		// is kept in a fraction of the time a parse takes.
		if ok && !o.idle.keep(in) {
			in.close(ctx)
		}
		select {
		case <-wait:
		case <-ctx.Done():
		}
		in, ok = o.idle.take(holds)
	}
	snap := o.snapshotOf(data.id)
	if snap == nil && (!ok || !holds(in)) {
		o.want(data.id)
	}
	if ok && in.dataID != data.id && snap != nil {
		// An instance of another document: a new one from the snapshot
		// needs no parse, and this one's memory is freed.
		in.close(ctx)
		ok = false
	}
	if !ok {
		var err error
		if snap != nil {
			in, err = o.fromSnapshot(ctx, snap)
		} else {
			in, err = o.instantiate(ctx)
		}
		if err != nil {
			return nil, err
		}
	}
	if in.dataID != data.id {
		// The data is the cluster's, not the policy's work: its parse is
		// bounded by dataLoadTimeout, not by the request, so that a large
		// inventory that changed is loaded once even when its first
		// request runs out of time meanwhile. That request fails; the
		// instance, with the data, serves the next.
		loadCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dataLoadTimeout)
		err := o.load(loadCtx, in, data)
		cancel()
		if err != nil {
			in.close(ctx)
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			o.put(ctx, in)
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, ErrDeadlineExceeded
			}
			return nil, err
		}
	}
	return in, nil
}

// dataLoadTimeout bounds parsing a data document into an instance.
const dataLoadTimeout = 30 * time.Second

// put keeps a used instance, or closes it when its evaluation grew its
// memory past what keepGrown allows above the data (the heap mark after it),
// or enough instances are idle. The next evaluation starts from that mark
// whatever the size, so the bound is on the memory idle instances hold:
// the data a Rego policy reads, however large, and some room to evaluate,
// not what a one-off huge request needed.
//
// An instance of the document of the snapshot that parsed the document
// itself is put on the snapshot (rebase). An instance of a document that
// was wanted (want) and is newer than the snapshot's is remembered
// (remember) before it is kept, in the background: the snapshot, a copy of
// the instance's memory, costs a third to a half of the parse it spares the
// next instances, and the request that made the instance parse the
// document does not wait for it.
func (o *OPA) put(ctx context.Context, in *opaInstance) {
	if !keepGrown(uint64(in.mod.Memory().Size()), in.heap, keptGrowth) {
		in.close(ctx)
		return
	}
	if s := o.snapshotOf(in.dataID); s != nil && in.mem.snap != s.mem {
		if err := rebase(in, s); err != nil {
			in.close(ctx)
			return
		}
	} else if remembered := o.startSnapshot(in.dataID); remembered != nil {
		go func() {
			defer o.snapshotting.Done()
			defer remembered()
			ctx := context.WithoutCancel(ctx)
			if err := o.remember(in); err != nil {
				o.r.logger.WarnContext(ctx, "OPA instance dropped: cannot snapshot its data", "error", err)
				in.close(ctx)
				return
			}
			if !o.idle.keep(in) {
				in.close(ctx)
			}
		}()
		return
	}
	if !o.idle.keep(in) {
		in.close(ctx)
	}
}

// Close releases the idle instances. Evaluations in flight finish; their
// instances are then closed.
func (o *OPA) Close(ctx context.Context) {
	for _, in := range o.idle.drain() {
		in.close(ctx)
	}
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.snapshotting.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.snap != nil {
		// Evaluations in flight keep their mappings of it.
		o.snap.mem.release()
		o.snap = nil
	}
}

// opaCaller calls an instance's exports one after the other; the first
// failure sticks, and later calls do nothing.
type opaCaller struct {
	in  *opaInstance
	ctx context.Context
	err error
}

func (c *opaCaller) call(fn int, args ...uint64) uint64 {
	if c.err != nil {
		return 0
	}
	res, err := c.in.fn[fn].Call(c.ctx, args...)
	if err != nil {
		c.err = fmt.Errorf("%s: %w", opaExports[fn], err)
		return 0
	}
	if len(res) == 0 {
		return 0
	}
	return uint64(api.DecodeU32(res[0]))
}

// value copies b into the guest and parses it with parse (fnJSONParse or
// fnValueParse); what names it in errors.
func (c *opaCaller) value(parse int, b []byte, what string) uint64 {
	p := c.call(fnMalloc, uint64(len(b)))
	if c.err == nil && !c.in.mod.Memory().Write(uint32(p), b) {
		c.err = fmt.Errorf("writing the %s into guest memory: %w", what, errGuestOutOfBounds)
	}
	addr := c.call(parse, p, uint64(len(b)))
	if c.err == nil && addr == 0 {
		c.err = fmt.Errorf("the policy cannot parse the %s", what)
	}
	return addr
}

// json dumps the value at addr as JSON.
func (c *opaCaller) json(addr uint64) []byte {
	return c.string(c.call(fnJSONDump, addr))
}

// jsonMax dumps the value at addr as JSON, of at most limit bytes: a
// longer dump is not read, and the call fails with ResponseTooLargeError.
func (c *opaCaller) jsonMax(addr uint64, limit int) []byte {
	addr = c.call(fnJSONDump, addr)
	if c.err != nil {
		return nil
	}
	var s []byte
	s, c.err = cStringMax(c.in.mod.Memory(), addr, limit)
	return s
}

// string reads the NUL-terminated string at addr.
func (c *opaCaller) string(addr uint64) []byte {
	if c.err != nil {
		return nil
	}
	var s []byte
	s, c.err = cString(c.in.mod.Memory(), addr)
	return s
}

// result returns the calls' error as the package reports it: a deadline, what
// a host function stopped the guest with, or a trap.
func (c *opaCaller) result(ctx context.Context, st *opaCall, interrupted bool) error {
	switch {
	case c.err == nil:
		return nil
	case interrupted:
		return callError(ctx, c.err, "", true)
	case st != nil && st.err != nil:
		return st.err
	default:
		return callError(ctx, c.err, "", false)
	}
}

// cStringMax is cString for a string of at most limit bytes: past them, a
// *ResponseTooLargeError, and nothing is copied.
func cStringMax(mem api.Memory, addr uint64, limit int) ([]byte, error) {
	size := uint64(mem.Size())
	if addr >= size {
		return nil, errGuestOutOfBounds
	}
	b, _ := mem.Read(uint32(addr), uint32(min(size-addr, uint64(limit)+1)))
	n := bytes.IndexByte(b, 0)
	switch {
	case n >= 0:
		return bytes.Clone(b[:n]), nil
	case len(b) > limit:
		return nil, &ResponseTooLargeError{Limit: limit}
	}
	return nil, errors.New("unterminated string in guest memory")
}

func cString(mem api.Memory, addr uint64) ([]byte, error) {
	size := uint64(mem.Size())
	if addr >= size {
		return nil, errGuestOutOfBounds
	}
	b, _ := mem.Read(uint32(addr), uint32(size-addr))
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return nil, errors.New("unterminated string in guest memory")
	}
	return bytes.Clone(b[:n]), nil
}

// opaCall is what the env host functions of one evaluation read and write.
// It belongs to the goroutine running the evaluation.
type opaCall struct {
	in    *opaInstance
	names map[int32]string
	run   OPABuiltinFunc
	err   error // why a host function stopped the guest
}

type opaCallKey struct{}

// stop records why the guest must stop and unwinds it.
func (st *opaCall) stop(err error) {
	if st.err == nil {
		st.err = err
	}
	panic(err)
}

// builtin runs the builtin with the given id on the values at addrs and
// returns the address of its result, 0 when it is undefined.
func (st *opaCall) builtin(ctx context.Context, id uint32, addrs []uint64) uint64 {
	name, ok := st.names[int32(id)]
	if !ok {
		st.stop(fmt.Errorf("the policy called unknown builtin %d", id))
	}
	c := &opaCaller{in: st.in, ctx: ctx}
	args := make([][]byte, len(addrs))
	for i, addr := range addrs {
		args[i] = c.string(c.call(fnValueDump, uint64(api.DecodeU32(addr))))
	}
	if c.err != nil {
		st.stop(c.err)
	}
	res, err := st.run(name, args)
	if err != nil {
		st.stop(fmt.Errorf("%s: %w", name, err))
	}
	if res == nil {
		return 0
	}
	addr := c.value(fnValueParse, res, "result of "+name)
	if c.err != nil {
		st.stop(c.err)
	}
	return addr
}

// OPAAbortError reports an OPA module that called opa_abort: an internal
// error of the policy, such as a conflict between rule values.
type OPAAbortError struct{ Message string }

func (e *OPAAbortError) Error() string { return "policy aborted: " + e.Message }

// instantiateOPAHost instantiates the env host module OPA modules import,
// once per runtime. Holding codeMu serialises the calls, and keeps the
// host functions' machine code from appearing while a module compiles.
func (r *Runtime) instantiateOPAHost(ctx context.Context) error {
	codeMu.Lock()
	defer codeMu.Unlock()
	if err := r.instantiateOPAHostIn(ctx, r.rt); err != nil {
		return err
	}
	if r.memRT != nil {
		return r.instantiateOPAHostIn(ctx, r.memRT)
	}
	return nil
}

// instantiateOPAHostIn instantiates the env host module in rt, the
// runtime's own or its in-memory one, unless it is there. The caller holds
// codeMu.
func (r *Runtime) instantiateOPAHostIn(ctx context.Context, rt wazero.Runtime) error {
	if rt.Module(opaEnvModule) != nil {
		return nil
	}
	b := rt.NewHostModuleBuilder(opaEnvModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
		msg, err := cString(m.Memory(), uint64(api.DecodeU32(stack[0])))
		if err != nil {
			msg = []byte("(unreadable message)")
		}
		abort := &OPAAbortError{Message: string(msg)}
		if st, _ := ctx.Value(opaCallKey{}).(*opaCall); st != nil {
			st.stop(abort)
		}
		panic(abort)
	}), i32x1, nil).Export("opa_abort")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
		if msg, err := cString(m.Memory(), uint64(api.DecodeU32(stack[0]))); err == nil {
			r.logger.InfoContext(ctx, "policy console output", "message", string(msg))
		}
	}), i32x1, nil).Export("opa_println")
	for n := range 5 { // opa_builtin0..4(id, reserved, args...) -> result
		params := slices.Repeat([]api.ValueType{i32}, 2+n)
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
			st, _ := ctx.Value(opaCallKey{}).(*opaCall)
			if st == nil {
				panic(errors.New("builtin called outside an evaluation"))
			}
			stack[0] = st.builtin(ctx, api.DecodeU32(stack[0]), stack[2:2+n])
		}), params, i32x1).Export(fmt.Sprintf("opa_builtin%d", n))
	}
	_, err := b.Instantiate(ctx)
	return err
}
