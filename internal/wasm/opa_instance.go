package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// One instance of an OPA module, and the calls of OPA's wasm ABI on it.

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

// opaInstance is one instance of an OPA module with a data document loaded.
// It has no lock: it is used by one goroutine at a time, the one that took
// it from the pool (OPA.get) until it puts it back or closes it.
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

// load parses data into in, in place of the data it had: the heap is set
// back to where it was before any data, so nothing of the old document, nor
// of the evaluations that read it, stays reachable. An instance whose load
// failed must be closed.
func (o *OPA) load(ctx context.Context, in *opaInstance, data OPAData) error {
	o.loads.Add(1)
	parsed := o.snaps.parsing(data.id)
	c := &opaCaller{in: in, ctx: ctx}
	done := in.guard(ctx)
	c.call(fnHeapSet, in.base)
	addr := c.value(fnJSONParse, data.json, "data")
	heap := c.call(fnHeapGet)
	if err := c.result(ctx, nil, done()); err != nil {
		parsed(false)
		return fmt.Errorf("loading the policy data: %w", err)
	}
	in.dataID, in.data, in.heap = data.id, addr, heap
	parsed(true)
	return nil
}

func (in *opaInstance) close(ctx context.Context) { in.r.closeInstance(ctx, in.mod) }

// opaCaller calls an instance's exports one after the other; the first
// failure sticks, and later calls do nothing. It belongs to the goroutine
// that uses the instance.
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
