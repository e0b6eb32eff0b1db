package wasm

import (
	"context"
	"sync"
	"time"
)

// Guest code runs only on a guest slot (GOMAXPROCS-1 of them, see
// Runtime.guestSlots): the Go scheduler cannot preempt it, and a free P is
// what lets the timers that interrupt guests run. Which call gets a slot
// next is the scheduler's choice, made so that a policy that behaves keeps
// its share of the CPU however many calls of other policies loop:
//
//   - A call starts short. Short calls take free slots, and freed slots, in
//     the order they asked.
//   - A call that has run for longCall is long. At its yield points (every
//     loopBudget loop iterations, see interrupt.go), once it has run for a
//     quantum, a long call gives its slot back when short calls are waiting,
//     or are running and the calls running outnumber the cores; it waits
//     until that is no longer so, or for longWait, after which it takes the
//     next freed slot before any short call, unless another long call is on
//     such a turn already. So short calls run on cores long calls are not
//     spinning on, and long calls, together, still run about a quantum
//     every longWait while short ones keep coming.
//   - A call waiting in a host call holds no slot: it runs no guest code.
//
// A call whose deadline passes while it waits for a slot goes on without
// one: its interrupt flag is set, and it traps at its next check, a few
// instructions away.
const (
	longCall = 10 * time.Millisecond
	quantum  = 2 * time.Millisecond
	longWait = 10 * time.Millisecond
)

// scheduler hands out a runtime's guest slots.
type scheduler struct {
	cores int // the CPUs the process may run on

	mu           sync.Mutex
	free         int
	shortRunning int       // short calls holding a slot
	longRunning  int       // long calls holding a slot
	forced       int       // long calls on a turn longWait gave them: at most one
	nextForced   time.Time // no such turn before
	short        []*waiter // waiting for a slot, served first to last
	long         []*waiter // long calls parked until short ones leave them a core
}

func newScheduler(slots, cores int) *scheduler {
	return &scheduler{free: slots, cores: max(cores, 1)}
}

// crowdedLocked reports whether short calls want cores long calls hold.
func (s *scheduler) crowdedLocked() bool {
	return len(s.short) > 0 || s.shortRunning > 0 && s.shortRunning+s.longRunning > s.cores
}

// waiter is a call waiting for a slot; granted is closed when it has one.
type waiter struct {
	sl      *slot
	granted chan struct{}
	done    bool // granted; guarded by scheduler.mu
}

// slot is a call's claim on the scheduler, from enter to leave.
type slot struct {
	s          *scheduler
	start      time.Time // of the call
	sliceStart time.Time // of the current run on a slot
	long       bool
	forced     bool // on a turn taken after longWait; guarded by scheduler.mu
	held       bool // guarded by scheduler.mu while the call waits, else by the call
}

type slotKey struct{}

// enter waits for a slot for a new call; the context it returns carries the
// slot to the call's yield points and host calls.
func (s *scheduler) enter(ctx context.Context) (context.Context, *slot, error) {
	now := time.Now()
	sl := &slot{s: s, start: now}
	if err := s.acquire(ctx, sl, false); err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, slotKey{}, sl), sl, nil
}

// leave gives the slot back, if the call holds it.
func (sl *slot) leave() {
	s := sl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.held {
		sl.held = false
		s.releaseLocked(sl)
	}
}

// acquire waits until sl holds a slot, or ctx is done. first puts sl ahead
// of the short calls waiting.
func (s *scheduler) acquire(ctx context.Context, sl *slot, first bool) error {
	s.mu.Lock()
	if s.free > 0 && len(s.short) == 0 {
		s.free--
		s.grantLocked(sl)
		s.mu.Unlock()
		return nil
	}
	w := &waiter{sl: sl, granted: make(chan struct{})}
	if first {
		s.short = append([]*waiter{w}, s.short...)
	} else {
		s.short = append(s.short, w)
	}
	s.mu.Unlock()
	return s.wait(ctx, w)
}

// wait waits for w's grant, or for ctx. A parked long call (in s.long)
// also waits for longWait at a time: then, unless another long call is
// already running on such a turn, it moves to the head of the short queue.
func (s *scheduler) wait(ctx context.Context, w *waiter) error {
	var timeout <-chan time.Time
	if w.sl.long {
		timer := time.NewTimer(longWait)
		defer timer.Stop()
		timeout = timer.C
	}
	for {
		select {
		case <-w.granted:
			return nil
		case <-timeout:
			s.mu.Lock()
			if wait := time.Until(s.nextForced); s.forced > 0 || wait > 0 {
				// One long call at a time takes such turns, one every
				// longWait.
				s.mu.Unlock()
				timeout = time.After(max(wait, quantum))
				continue
			}
			timeout = nil
			if !w.done && remove(&s.long, w) {
				s.forced++
				w.sl.forced = true
				if s.free > 0 {
					s.free--
					s.grantLocked(w.sl)
					w.done = true
					close(w.granted)
				} else {
					s.short = append([]*waiter{w}, s.short...)
				}
			}
			s.mu.Unlock()
		case <-ctx.Done():
			s.mu.Lock()
			defer s.mu.Unlock()
			if w.done {
				return nil // granted meanwhile: keep it, leave gives it back
			}
			remove(&s.short, w)
			remove(&s.long, w)
			if w.sl.forced {
				w.sl.forced = false
				s.forced--
			}
			return ctx.Err()
		}
	}
}

// grantLocked gives sl a slot it has taken from free or from a caller.
func (s *scheduler) grantLocked(sl *slot) {
	sl.held = true
	sl.sliceStart = time.Now()
	if sl.long {
		s.longRunning++
	} else {
		s.shortRunning++
	}
}

// releaseLocked hands the slot sl held to the next call: the first waiting
// short call (or long call moved among them), else a parked long call when
// a core is left, else back to free.
func (s *scheduler) releaseLocked(sl *slot) {
	if sl.forced {
		sl.forced = false
		s.forced--
		s.nextForced = time.Now().Add(longWait)
	}
	if sl.long {
		s.longRunning--
	} else {
		s.shortRunning--
	}
	next := pop(&s.short)
	if next == nil && (s.shortRunning == 0 || s.shortRunning+s.longRunning < s.cores) {
		next = pop(&s.long)
	}
	if next == nil {
		s.free++
		return
	}
	s.grantLocked(next.sl)
	next.done = true
	close(next.granted)
}

// yield is called at the call's yield points. It makes a call long once it
// has run for longCall, and parks a long call that has run a quantum while
// short calls want the cores.
func (sl *slot) yield(ctx context.Context) {
	if sl == nil || !sl.held {
		return
	}
	now := time.Now()
	if now.Sub(sl.sliceStart) < quantum {
		return
	}
	s := sl.s
	s.mu.Lock()
	if !sl.long && now.Sub(sl.start) >= longCall {
		sl.long = true
		s.shortRunning--
		s.longRunning++
	}
	if !sl.long || !s.crowdedLocked() {
		sl.sliceStart = now
		s.mu.Unlock()
		return
	}
	sl.held = false
	s.releaseLocked(sl)
	w := &waiter{sl: sl, granted: make(chan struct{})}
	s.long = append(s.long, w)
	s.mu.Unlock()
	_ = s.wait(ctx, w) // past the deadline, the guest traps at its next check
}

// pause gives the slot back while the call waits outside guest code (a
// host call); resume takes one again.
func (sl *slot) pause() {
	if sl != nil {
		sl.leave()
	}
}

func (sl *slot) resume(ctx context.Context) {
	if sl != nil {
		_ = sl.s.acquire(ctx, sl, false)
	}
}

// slotOf returns the slot of the call ctx belongs to, and the call's own
// context (whose deadline is the call's): a waPC, OPA or one-off WASI
// call's context, or the request a pooled WASI instance is serving. Nil
// when there is none.
func slotOf(ctx context.Context) (*slot, context.Context) {
	if sl, ok := ctx.Value(slotKey{}).(*slot); ok {
		return sl, ctx
	}
	if in := pooledInstance(ctx); in != nil && in.cur != nil {
		sl, _ := in.cur.ctx.Value(slotKey{}).(*slot)
		return sl, in.cur.ctx
	}
	return nil, ctx
}

func pop(q *[]*waiter) *waiter {
	if len(*q) == 0 {
		return nil
	}
	w := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	return w
}

func remove(q *[]*waiter, w *waiter) bool {
	for i, x := range *q {
		if x == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
}
