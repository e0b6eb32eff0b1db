package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
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
//
// The code is cut along its state machines, each with its own lock or none:
// this file is the pool (OPA: which instance an evaluation runs on, and
// what becomes of it afterwards); opa_data.go the data documents and their
// snapshot cache (opaSnapshots: loaded, wanted, pending, snapshotted);
// opa_instance.go one instance and the ABI calls on it (opaInstance,
// opaCaller), used by one goroutine at a time; opa_host.go the env host
// module and the builtins it dispatches to the host (opaCall).

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

// OPA evaluates the first entrypoint of a module compiled by CompileOPA. It
// is safe for concurrent use; each evaluation runs on an instance of its
// own.
type OPA struct {
	// r, mod, data and builtins are set by NewOPA and read-only after.
	r        *Runtime
	mod      *Module
	data     OPAData          // the data of NewOPA
	builtins map[int32]string // the builtins left to the host, by id

	// idle holds the instances between evaluations, under its own lock.
	idle idleSet[*opaInstance]
	// snaps is the data-snapshot cache, under its own lock (opa_data.go).
	snaps opaSnapshots
	loads atomic.Int64 // data documents parsed, for DataLoads
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

// DataLoads is how many times the instances have loaded a data document,
// NewOPA's included. It exists for tests and metrics that check a document
// is parsed once per instance and version.
func (o *OPA) DataLoads() int64 { return o.loads.Load() }

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
	if wait := o.snaps.pendingFor(data.id); wait != nil && (!ok || !holds(in)) {
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
	snap := o.snaps.of(data.id)
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
// was wanted (opaSnapshots.parsing) and is newer than the snapshot's is
// remembered (opaSnapshots.remember) before it is kept, in the background:
// the snapshot, a copy of the instance's memory, costs a third to a half of
// the parse it spares the next instances, and the request that made the
// instance parse the document does not wait for it.
func (o *OPA) put(ctx context.Context, in *opaInstance) {
	if !keepGrown(uint64(in.mod.Memory().Size()), in.heap, keptGrowth) {
		in.close(ctx)
		return
	}
	if s := o.snaps.of(in.dataID); s != nil && in.mem.snap != s.mem {
		if err := rebase(in, s); err != nil {
			in.close(ctx)
			return
		}
	} else if remembered := o.snaps.start(in.dataID); remembered != nil {
		go func() {
			defer remembered()
			ctx := context.WithoutCancel(ctx)
			if err := o.snaps.remember(in, o.mod); err != nil {
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
	o.snaps.close()
}
