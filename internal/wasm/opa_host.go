package wasm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The env host module of OPA modules: opa_abort, opa_println and the
// opa_builtin<N> functions through which a module calls the builtins it
// leaves to its host.

// OPABuiltinFunc runs, for one evaluation, a builtin that an OPA module
// leaves to its host (one of OPA.Builtins). The arguments and the result are
// Rego values in OPA's text form, as opa_value_dump writes and
// opa_value_parse reads them (JSON, plus sets); a nil result is undefined.
// An error stops the evaluation, and Eval returns it.
type OPABuiltinFunc func(name string, args [][]byte) ([]byte, error)

// opaCall is what the env host functions of one evaluation read and write.
// It belongs to the goroutine running the evaluation, and needs no lock.
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
//
// The arguments are what the guest hands the host in this call: together,
// in OPA's text form, they are bounded by Config.MaxHostCallBytes, as a
// waPC host call's payload is. An argument past the bound is not copied
// out of the guest, and the evaluation stops with a
// *BuiltinArgsTooLargeError: OPA's Go builtins would otherwise parse and
// work on a value of any size the guest could build (a policy calling
// regex.split or yaml.unmarshal on a huge string made of its input).
func (st *opaCall) builtin(ctx context.Context, id uint32, addrs []uint64) uint64 {
	name, ok := st.names[int32(id)]
	if !ok {
		st.stop(fmt.Errorf("the policy called unknown builtin %d", id))
	}
	c := &opaCaller{in: st.in, ctx: ctx}
	limit := st.in.r.maxHostCall
	left := limit
	args := make([][]byte, len(addrs))
	for i, addr := range addrs {
		dump := c.call(fnValueDump, uint64(api.DecodeU32(addr)))
		if c.err != nil {
			break
		}
		args[i], c.err = cStringMax(c.in.mod.Memory(), dump, left)
		if _, over := errors.AsType[*ResponseTooLargeError](c.err); over {
			st.stop(&BuiltinArgsTooLargeError{Builtin: name, Limit: limit})
		}
		left -= len(args[i])
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

// BuiltinArgsTooLargeError reports an OPA module that called a builtin
// left to the host with arguments over the cap (Config.MaxHostCallBytes):
// the evaluation stops with it.
type BuiltinArgsTooLargeError struct {
	Builtin string
	Limit   int
}

func (e *BuiltinArgsTooLargeError) Error() string {
	return fmt.Sprintf("the arguments of the builtin %s are over the limit of %d bytes per builtin call (--max-host-call-payload-bytes)", e.Builtin, e.Limit)
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
