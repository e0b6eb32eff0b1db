package wasm

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// Wapc runs calls into one waPC module (docs/compatibility.md#wapc-protocol),
// each on an instance in the state the module had right after initialisation.
// It is safe for concurrent use; each call gets an instance of its own.
type Wapc struct {
	r   *Runtime
	mod *Module

	// Set once the first instance has been initialised. Without a snapshot
	// (the module's globals cannot be saved) every call initialises a new
	// instance.
	snap    *memSnapshot
	pages   uint32   // memory size at the snapshot, in wasm pages
	globals []uint64 // values of mod.globals at the snapshot

	idle idleSet[*instance]
}

// instance is one wazero module instance with the memory it runs on. It is
// used by one goroutine at a time.
type instance struct {
	guestState
	r    *Runtime
	mod  api.Module
	sink *stdio
	call api.Function // __guest_call
}

func (in *instance) close(ctx context.Context) {
	in.r.closeInstance(ctx, in.mod)
}

// Init functions run after instantiation, in this order, when exported:
// Go reactors export _initialize, TinyGo modules _start, waPC guests
// wapc_init.
var wapcInitFunctions = []string{"_initialize", "_start", "wapc_init"}

// NewWapc prepares module for waPC calls: it instantiates and initialises it
// once (under ctx's deadline) and keeps that state as the snapshot every
// call starts from. maxIdle bounds the instances kept between calls.
func (r *Runtime) NewWapc(ctx context.Context, m *Module, maxIdle int) (*Wapc, error) {
	if !m.Exports("__guest_call") {
		return nil, errors.New("the module does not export __guest_call: it is not a waPC module")
	}
	w := &Wapc{r: r, mod: m, idle: newIdleSet[*instance](max(maxIdle, 1))}
	ctx, leave, err := r.enterGuest(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	in, err := w.instantiate(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := w.initialise(ctx, in); err != nil {
		in.close(ctx)
		return nil, err
	}
	if m.snapshot && in.mem != nil {
		size := in.mod.Memory().Size()
		snap, err := takeSnapshot(in.mem, int(size))
		if err != nil {
			in.close(ctx)
			return nil, err
		}
		w.snap, w.pages = snap, size/pageSize
		w.globals = in.saveGlobals(m)
		w.idle.keep(in)
	} else {
		in.close(ctx)
	}
	return w, nil
}

// instantiate creates an instance on memory of our own (a copy-on-write
// mapping of snap when given).
func (w *Wapc) instantiate(ctx context.Context, snap *memSnapshot) (*instance, error) {
	in := &instance{r: w.r, sink: &stdio{}}
	st := w.r.newCallState(nil)
	in.sink.call = st
	var memErr error
	ictx := context.WithValue(in.withMemory(ctx, snap, &memErr), callKey{}, st)
	mod, err := w.r.instantiate(ictx, w.mod, moduleConfig(w.mod, in.sink))
	in.sink.call = nil
	if err != nil {
		if memErr != nil {
			return nil, memErr
		}
		return nil, fmt.Errorf("instantiating module: %w", callError(ctx, err, st.stderrText(), false))
	}
	if mod.Memory() == nil {
		w.r.closeInstance(ctx, mod)
		return nil, errors.New("the module has no memory")
	}
	in.mod, in.call = mod, mod.ExportedFunction("__guest_call")
	if err := in.bind(mod, w.mod); err != nil {
		w.r.closeInstance(ctx, mod)
		return nil, err
	}
	return in, nil
}

// initialise runs the module's former start section, then its init
// functions. proc_exit(0) from one of them is not an error (TinyGo's _start
// ends that way).
func (w *Wapc) initialise(ctx context.Context, in *instance) error {
	st := w.r.newCallState(nil)
	in.sink.call = st
	defer func() { in.sink.call = nil }()
	cctx := context.WithValue(ctx, callKey{}, st)
	for _, name := range append([]string{startExport}, wapcInitFunctions...) {
		fn := in.mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		done := in.guard(ctx)
		_, err := fn.Call(cctx)
		interrupted := done()
		if err != nil {
			var exit *exitPanic
			if errors.As(err, &exit) && exit.code == 0 && !interrupted {
				continue
			}
			return fmt.Errorf("initialising module (%s): %w", name, callError(ctx, err, st.stderrText(), interrupted))
		}
	}
	return nil
}

// get returns an instance in the snapshot state.
func (w *Wapc) get(ctx context.Context) (*instance, error) {
	if in, ok := w.idle.take(nil); ok {
		return in, nil
	}

	in, err := w.instantiate(ctx, w.snap)
	if err != nil {
		return nil, err
	}
	if w.snap == nil {
		if err := w.initialise(ctx, in); err != nil {
			in.close(ctx)
			return nil, err
		}
		return in, nil
	}
	// Instantiation wrote the data segments and ran any start section;
	// the snapshot replaces all of that.
	if err := in.startFrom(in.mod, w.pages, w.globals); err != nil {
		in.close(ctx)
		return nil, err
	}
	return in, nil
}

// put resets a used instance and keeps it, or closes it when it cannot be
// reset or enough instances are idle.
//
// A call may grow the memory (a large host-call answer): wasm memory cannot
// shrink, so the instance is put back with the snapshot's bytes below the
// snapshot size and zeros above it, and is kept while keepGrown allows. The
// guest's allocator, restored with the snapshot, knows nothing of the memory
// above; it sees it as memory.size and gets it zeroed, as fresh memory, when
// it grows (Go and Rust allocators grow from memory.size or from their own
// end; either way their new memory reads as zero).
func (w *Wapc) put(ctx context.Context, in *instance) {
	if w.snap == nil || !w.reset(in) || !w.idle.keep(in) {
		in.close(ctx)
	}
}

// putFailed is put for an instance whose call failed: a trap, an
// interruption at the deadline, or a guest that exited. A trap leaves
// nothing behind that the snapshot does not restore: the guest's state is
// its memory and globals, and wazero keeps a module usable after a trap.
// Only the call's function is replaced, with its stack, which a guest that
// recursed without bound grew to hundreds of MiB. Keeping the instance
// saves its replacement on the next call: 1.7 ms of instantiation against
// 23 µs for a call of the labels policy (BenchmarkWapcTrap,
// BenchmarkWapcCall), which let a policy that fails fast take the CPU
// from policies that answer. An exit closes the module: that instance goes.
func (w *Wapc) putFailed(ctx context.Context, in *instance) {
	if in.mod.IsClosed() {
		in.close(ctx)
		return
	}
	in.call = in.mod.ExportedFunction("__guest_call")
	w.put(ctx, in)
}

// reset puts a used instance back in the snapshot state, and reports
// whether it could.
func (w *Wapc) reset(in *instance) bool {
	snapSize, size := uint64(w.pages)*pageSize, uint64(in.mod.Memory().Size())
	if !keepGrown(size, snapSize, droppedGrowth) || in.mem.dropAbove(snapSize, size) != nil {
		return false
	}
	return in.restore(w.globals) == nil
}

// Close releases the idle instances and the snapshot. Calls in flight
// finish; their instances are then closed.
func (w *Wapc) Close(ctx context.Context) {
	for _, in := range w.idle.drain() {
		in.close(ctx)
	}
	// The snapshot's mappings stay valid for instances still in flight:
	// the kernel keeps the memfd alive while any mapping of it exists.
	if w.snap != nil {
		w.snap.release()
	}
}

// Call runs the waPC operation op with payload and returns the guest's
// response. host answers the guest's host calls. The call is bounded by ctx:
// past its deadline the instance is stopped and ErrDeadlineExceeded returned.
func (w *Wapc) Call(ctx context.Context, host HostCaller, op string, payload []byte) ([]byte, error) {
	ctx, leave, err := w.r.enterGuest(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	in, err := w.get(ctx)
	if err != nil {
		return nil, err
	}
	st := w.r.newCallState(host)
	st.op, st.payload = []byte(op), payload
	in.sink.call = st
	done := in.guard(ctx)
	res, err := in.call.Call(context.WithValue(ctx, callKey{}, st), uint64(len(op)), uint64(len(payload)))
	interrupted := done()
	in.sink.call = nil
	if err != nil {
		w.putFailed(ctx, in)
		w.r.giveBack.request()
		err = callError(ctx, err, st.stderrText(), interrupted)
		if interrupted {
			return nil, err
		}
		return nil, &GuestCallError{Msg: err.Error(), err: err}
	}
	w.put(ctx, in)
	if st.responseTooLarge > 0 {
		return nil, &ResponseTooLargeError{Size: st.responseTooLarge, Limit: w.r.maxResponse}
	}
	if res[0] == 1 {
		if st.hasResponse {
			return st.guestResponse, nil
		}
		if st.hasError {
			return nil, &GuestCallError{Msg: string(st.guestError)}
		}
		return nil, &GuestCallError{Msg: "No error message OR response set for call success"}
	}
	if st.hasError {
		return nil, &GuestCallError{Msg: string(st.guestError)}
	}
	return nil, &GuestCallError{Msg: "No error message set for call failure"}
}

// GuestCallError is a waPC call that failed: the guest reported an error or
// trapped. Its text is wapc-rs's, which Kubewarden users see.
type GuestCallError struct {
	Msg string
	err error
}

func (e *GuestCallError) Error() string { return "Guest call failure: " + e.Msg }

// Unwrap returns the trap or exit error behind the failure, if any.
func (e *GuestCallError) Unwrap() error { return e.err }
