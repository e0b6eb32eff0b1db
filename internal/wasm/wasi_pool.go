package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// Restoring WASI commands.
//
// A WASI command does all its work in _start: language runtime start-up,
// package initialisation, then reading stdin, evaluating, writing stdout and
// exiting. For a Go wasip1 policy the start-up is most of the cost. A
// WASIPool pays it once per instance: an instance runs _start for its first
// request, and when the guest first calls fd_read on stdin — before any byte
// of the request is delivered — the pool saves the whole guest state: the
// wasm call stack (wazero's experimental.Snapshotter), the linear memory (a
// copy-on-write snapshot, see snapshot_linux.go) and every mutable global
// (exported by exportMutableGlobals). Everything the guest did up to that
// point depends on nothing but the module and argv, which is why a pool serves
// one command.
//
// When the guest calls proc_exit, the instance's goroutine (still inside the
// _start call) hands the result back, puts the memory and the globals back,
// and parks in proc_exit waiting for the next request. That request is
// delivered as the answer of the saved fd_read: its stdin is copied into the
// buffers the guest passed, and the saved stack is restored with fd_read's
// result, so the guest carries on exactly as a fresh instance that has just
// been handed that stdin.
//
// What a restore repeats: whatever the guest took from the clocks or from
// random_get before its first read of stdin. Go's runtime seeds its map hash
// and its internal generator at start-up, so every request served by one
// instance sees the same map iteration order and, from math/rand/v2 and
// math/rand's top-level functions (which draw from that generator), the same
// sequence of numbers. A fresh instance per request would get new seeds,
// though nothing guarantees them to differ, and no program may rely on them.
// random_get and the clocks are called live after a restore: crypto/rand and
// time.Now stay fresh.
//
// An instance is discarded (closed, its goroutine ended; a new one is made
// when needed) after a request that trapped, was interrupted, grew the
// memory, closed a file descriptor, or returned from _start instead of
// calling proc_exit. A module whose guest exits without reading stdin, makes
// a host call or closes a file descriptor before its first read, or cannot be
// snapshotted, is run in a fresh instance per request, as RunWASI does.

// WASIPool runs one command of a WASI command module
// (docs/compatibility.md#wasi-protocol) on long-lived instances, each request
// starting from the state the guest had when it first read stdin. It is safe
// for concurrent use: every request gets an instance of its own.
//
// Close the pool before the Runtime: its idle instances wait on goroutines of
// their own.
type WASIPool struct {
	r       *Runtime
	mod     *Module
	command string
	base    context.Context // of the long-lived _start calls: never cancelled

	// fresh is set once the module proved that it cannot be served from a
	// snapshot: every run is then RunWASI's.
	fresh atomic.Bool

	mu      sync.Mutex
	idle    []*wasiInstance
	maxIdle int
	closed  bool
	created int            // instances created
	running sync.WaitGroup // instance goroutines
}

// NewWASIPool prepares a pool that runs module m with argv ["policy.wasm",
// command]. It runs no guest code: the first request creates the first
// instance. maxIdle bounds the instances kept between requests (at least 1).
func (r *Runtime) NewWASIPool(ctx context.Context, m *Module, command string, maxIdle int) (*WASIPool, error) {
	if !m.Exports("_start") {
		return nil, errNotCommand
	}
	p := &WASIPool{
		r:       r,
		mod:     m,
		command: command,
		base:    context.WithoutCancel(ctx),
		maxIdle: max(maxIdle, 1),
	}
	if !m.snapshot {
		p.fresh.Store(true)
	}
	return p, nil
}

// Run runs the command with stdin holding input and host answering the
// guest's host calls (their answers are appended to stdin). Its results are
// RunWASI's: what the guest wrote when it exits with 0, an *ExitError with
// the guest's stderr when it exits with another code, ErrDeadlineExceeded
// when it runs past ctx's deadline, a *TrapError when it traps.
func (p *WASIPool) Run(ctx context.Context, host HostCaller, input []byte) (WASIResult, error) {
	ctx, leave, err := p.r.enterGuest(ctx)
	if err != nil {
		return WASIResult{}, err
	}
	defer leave()
	if p.fresh.Load() {
		return p.r.runWASI(ctx, p.mod, host, p.command, input)
	}
	in, closed := p.get()
	if closed {
		// Serve the requests still arriving after Close without leaving
		// anything behind.
		return p.r.runWASI(ctx, p.mod, host, p.command, input)
	}
	st := p.r.newCallState(host)
	st.ctx = ctx
	st.stdin = input
	req := &wasiRequest{ctx: ctx, st: st, reply: make(chan wasiOutcome, 1)}
	if in != nil {
		in.reqs <- req
	} else if err := p.start(ctx, req); errors.Is(err, errPoolClosed) {
		return p.r.runWASI(ctx, p.mod, host, p.command, input)
	} else if err != nil {
		return WASIResult{}, err
	}
	out := <-req.reply
	return out.res, out.err
}

// Close ends the idle instances and waits, until ctx is done, for those
// serving a request to finish theirs and end too. Requests after Close run
// in fresh instances.
func (p *WASIPool) Close(ctx context.Context) {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, in := range idle {
		in.reqs <- nil
	}
	done := make(chan struct{})
	go func() {
		p.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// get returns an idle instance, or nil when there is none; closed reports
// a closed pool.
func (p *WASIPool) get() (in *wasiInstance, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, true
	}
	if n := len(p.idle); n > 0 {
		in = p.idle[n-1]
		p.idle = p.idle[:n-1]
	}
	return in, false
}

// put keeps a restored instance; false means the instance must end.
func (p *WASIPool) put(in *wasiInstance) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.maxIdle {
		return false
	}
	p.idle = append(p.idle, in)
	return true
}

// wasiRequest is one Run handed to an instance.
type wasiRequest struct {
	ctx   context.Context
	st    *callState
	reply chan wasiOutcome // buffered: the instance never waits on it
}

type wasiOutcome struct {
	res WASIResult
	err error
}

// wasiInstance is one instance of a pool and the goroutine running its
// _start call. Its fields belong to that goroutine; requests reach it through
// reqs.
type wasiInstance struct {
	guestState // mem is nil when the module has no memory
	pool       *WASIPool
	mod        api.Module
	sink       *stdio
	reqs       chan *wasiRequest // capacity 1; nil asks the instance to end

	cur  *wasiRequest      // the request being served
	stop func() (irq bool) // ends cur's deadline guard

	inStart    bool // _start is running (not the former start section)
	stdinRead  bool // the guest has called fd_read on stdin
	noSnapshot bool // the state at the first read cannot be saved exactly
	fdClosed   bool // the guest closed a file descriptor
	snap       *wasiSnapshot
}

// wasiSnapshot is the state of an instance at its first read of stdin.
type wasiSnapshot struct {
	stack    experimental.Snapshot
	stackBuf *[]byte // the buffer stack restores onto, see snapshotStackBuffer
	pristine []byte  // its content at the snapshot
	mem      *memSnapshot
	memSize  uint32
	globals  []uint64
	// The arguments of the fd_read call the restored guest is waiting in.
	iovs, iovsCount, resultNread uint32
	// What the guest wrote before reading stdin, replayed in every request.
	stdout, stderr []byte
}

// errInstanceDone ends the _start call of an instance that is discarded or
// asked to end; the request it served, if any, has had its answer.
var errInstanceDone = errors.New("wasi instance discarded")

type wasiInstanceKey struct{}

// pooledInstance returns the instance whose _start call ctx belongs to.
func pooledInstance(ctx context.Context) *wasiInstance {
	in, _ := ctx.Value(wasiInstanceKey{}).(*wasiInstance)
	return in
}

// start creates an instance for req and runs req on it from the beginning
// of _start.
func (p *WASIPool) start(ctx context.Context, req *wasiRequest) error {
	in := &wasiInstance{pool: p, sink: &stdio{call: req.st}, reqs: make(chan *wasiRequest, 1)}
	var memErr error
	ictx := in.withMemory(context.WithValue(ctx, callKey{}, req.st), nil, &memErr)
	mod, err := p.r.instantiate(ictx, p.mod, moduleConfig(p.mod, in.sink, wasiProgramName, p.command))
	if err != nil {
		if memErr != nil {
			return memErr
		}
		return fmt.Errorf("instantiating module: %w", err)
	}
	in.mod = mod
	if err := in.bind(mod, p.mod); err != nil {
		p.r.closeInstance(ctx, mod)
		return err
	}
	p.mu.Lock()
	if p.closed { // Close may be waiting for the goroutines already
		p.mu.Unlock()
		p.r.closeInstance(ctx, mod)
		return errPoolClosed
	}
	p.created++
	p.running.Add(1)
	p.mu.Unlock()
	go in.run(req)
	return nil
}

var errPoolClosed = errors.New("the WASI pool is closed")

// run is the goroutine of an instance: its _start call, which serves the
// instance's first request from the beginning and, once the snapshot is
// taken, every later one from inside proc_exit.
func (in *wasiInstance) run(first *wasiRequest) {
	p := in.pool
	defer p.running.Done()
	defer in.close()
	in.begin(first)
	ctx := context.WithValue(p.base, callKey{}, in.sink)
	ctx = experimental.WithSnapshotter(context.WithValue(ctx, wasiInstanceKey{}, in))
	var err error
	for _, name := range []string{startExport, "_start"} {
		if fn := in.mod.ExportedFunction(name); fn != nil {
			in.inStart = name == "_start"
			if _, err = fn.Call(ctx); err != nil {
				break
			}
		}
	}
	if errors.Is(err, errInstanceDone) || in.cur == nil {
		return // no request waits for an answer
	}
	// The call ended while serving in.cur: _start returned, or the guest
	// exited before the snapshot, or trapped, or was interrupted. The
	// result is RunWASI's.
	irq := in.stop()
	in.sink.call = nil
	req := in.cur
	res := WASIResult{Stdout: req.st.stdout.buf, Stderr: req.st.stderrText()}
	returned := err == nil
	if err != nil {
		var exit *exitPanic
		if errors.As(err, &exit) && exit.code == 0 && !irq {
			err = nil
		} else {
			err = callError(req.ctx, err, res.Stderr, irq)
		}
	}
	// What the guest does on its own it will do every time: end without a
	// usable snapshot, or return from _start, after which no restore is
	// possible. Traps and deadlines decide nothing.
	var exitErr *ExitError
	ended := err == nil || errors.As(err, &exitErr)
	if tooLarge := req.st.outputError(); tooLarge != nil && !irq {
		res.Stdout, err = nil, tooLarge
	}
	if !irq && (in.noSnapshot || (ended && in.snap == nil) || (returned && in.snap != nil)) {
		p.fresh.Store(true)
	}
	if err != nil {
		p.r.giveBack.request() // the instance ends with this call
	}
	req.reply <- wasiOutcome{res: res, err: err}
}

func (in *wasiInstance) close() {
	in.pool.r.closeInstance(context.Background(), in.mod)
	if in.snap != nil && in.snap.mem != nil {
		in.snap.mem.release()
	}
}

// begin makes req the request the guest serves, under req's deadline.
func (in *wasiInstance) begin(req *wasiRequest) {
	if s := in.snap; s != nil {
		req.st.stdout.buf = append(req.st.stdout.buf, s.stdout...)
		req.st.stderr.buf = append(req.st.stderr.buf, s.stderr...)
	}
	in.cur = req
	in.sink.call = req.st
	in.stop = in.guard(req.ctx)
}

// firstRead runs before every fd_read of the instance's guest and takes the
// snapshot at the first one on stdin.
func (in *wasiInstance) firstRead(ctx context.Context, m api.Module, params []uint64) {
	if in.stdinRead || int32(params[0]) != 0 {
		return
	}
	in.stdinRead = true
	st := in.sink.call
	// Before this read the guest must have depended on nothing but the
	// module and argv: no host call (its answer would be in stdin), no file
	// descriptor closed (the fd table is not restored), no stdin read by the
	// former start section.
	if !in.inStart || st.hostCalled || in.fdClosed || in.mem == nil || m.Memory() == nil {
		in.noSnapshot = true
		return
	}
	stack := experimental.GetSnapshotter(ctx).Snapshot()
	buf := snapshotStackBuffer(stack)
	if buf == nil {
		in.noSnapshot = true
		return
	}
	size := m.Memory().Size()
	mem, err := takeSnapshot(in.mem, int(size))
	if err != nil {
		in.noSnapshot = true
		return
	}
	s := &wasiSnapshot{
		stack:       stack,
		stackBuf:    buf,
		pristine:    append([]byte(nil), (*buf)...),
		mem:         mem,
		memSize:     size,
		globals:     in.saveGlobals(in.pool.mod),
		iovs:        uint32(params[1]),
		iovsCount:   uint32(params[2]),
		resultNread: uint32(params[3]),
		stdout:      append([]byte(nil), st.stdout.buf...),
		stderr:      append([]byte(nil), st.stderr.buf...),
	}
	in.snap = s
}

// exit runs in proc_exit. On an instance with a snapshot it answers the
// request, restores the snapshot and waits for the next request, which it
// starts by restoring the guest's stack: it never returns.
func (in *wasiInstance) exit(m api.Module, code uint32) {
	s := in.snap
	if s == nil {
		return
	}
	irq := in.stop()
	in.sink.call = nil
	req := in.cur
	res := WASIResult{Stdout: req.st.stdout.buf, Stderr: req.st.stderrText()}
	var err error
	if code != 0 || irq {
		err = callError(req.ctx, &exitPanic{code: code}, res.Stderr, irq)
	}
	if tooLarge := req.st.outputError(); tooLarge != nil && !irq {
		res.Stdout, err = nil, tooLarge
	}
	keep := !irq && !in.fdClosed && m.Memory().Size() == s.memSize && in.restore(s.globals) == nil && in.pool.put(in)
	req.reply <- wasiOutcome{res: res, err: err}
	in.cur = nil
	if !keep {
		panic(errInstanceDone)
	}
	next := <-in.reqs // parked: no guest slot held, no deadline armed
	if next == nil {
		panic(errInstanceDone)
	}
	in.begin(next)
	errno := in.deliverStdin(m)
	copy(*s.stackBuf, s.pristine)
	s.stack.Restore([]uint64{uint64(errno)})
}

// WASI errno values fd_read can return here.
const errnoFault = 21

// deliverStdin does what wazero's fd_read (fdReadOrPread and readv in
// imports/wasi_snapshot_preview1/fs.go) does for the saved call on stdin:
// fill the iovecs in order, stop at the first short read, write the count.
func (in *wasiInstance) deliverStdin(m api.Module) uint32 {
	s, st, mem := in.snap, in.sink.call, m.Memory()
	iovs, ok := mem.Read(s.iovs, s.iovsCount<<3)
	if !ok {
		return errnoFault
	}
	var nread uint32
	for pos := 0; pos < len(iovs); pos += 8 {
		offset := binary.LittleEndian.Uint32(iovs[pos:])
		l := binary.LittleEndian.Uint32(iovs[pos+4:])
		if l == 0 {
			continue
		}
		b, ok := mem.Read(offset, l)
		if !ok {
			return errnoFault
		}
		n, _ := st.readStdin(b) // only io.EOF, which is not an error here
		nread += uint32(n)
		if n < int(l) {
			break
		}
	}
	if !mem.WriteUint32Le(s.resultNread, nread) {
		return errnoFault
	}
	return 0
}

// snapshotStackBuffer returns the call stack buffer that s restores.
//
// wazero v1.12.0 (engine wazevo, snapshot.doRestore in call_engine.go) does
// not copy the saved stack back on Restore: it makes the saved buffer the
// live stack, which the guest then overwrites as it runs. A snapshot is
// restored once per request, so the pool keeps a copy of the buffer and puts
// it back before every Restore. The buffer is an unexported field: nil when s
// does not have it (another engine or wazero version), and the pool then
// falls back to fresh instances.
func snapshotStackBuffer(s experimental.Snapshot) *[]byte {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("stack")
	if !f.IsValid() || f.Type() != reflect.TypeFor[[]byte]() || f.Len() == 0 {
		return nil
	}
	return (*[]byte)(unsafe.Pointer(f.UnsafeAddr()))
}

// wasiListeners watches two functions of wasi_snapshot_preview1 for pool
// instances: fd_read, to take the snapshot, and fd_close, because closing a
// descriptor changes the descriptor table, which a restore does not put
// back. (With no files configured, fd_close on stdio is the only call that
// changes it: fd_renumber refuses stdio and the other calls change nothing.)
type wasiListeners struct{}

func (wasiListeners) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	switch def.Name() {
	case "fd_read":
		return fdReadListener{}
	case "fd_close":
		return fdCloseListener{}
	}
	return nil
}

type fdReadListener struct{}

func (fdReadListener) Before(ctx context.Context, m api.Module, _ api.FunctionDefinition, params []uint64, _ experimental.StackIterator) {
	if in := pooledInstance(ctx); in != nil {
		in.firstRead(ctx, m, params)
	}
}

func (fdReadListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (fdReadListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

type fdCloseListener struct{}

func (fdCloseListener) Before(ctx context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	if in := pooledInstance(ctx); in != nil {
		in.fdClosed = true
	}
}

func (fdCloseListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (fdCloseListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}
