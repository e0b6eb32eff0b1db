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
//   - A call that has run for longCall is long. While short calls are
//     active (running, waiting, or seen within longWait), long calls run
//     only on turns: at most one per four cores at a time, each a quantum
//     long, the next longWait after one ends. At its yield points (every
//     loopBudget loop iterations, see interrupt.go) a long call that has run
//     its quantum parks until its next turn, or until short calls have been
//     quiet for longWait; then long calls take every free slot again.
//   - A call waiting in a host call holds no slot: it runs no guest code.
//
// Turns measure guest time only, but a short call also costs the CPU the
// server spends on its HTTP request, which is why long calls wait for
// short calls to be quiet, not merely for a free slot: on two cores, four
// looping calls take about a tenth of the CPU from a policy that answers
// in a millisecond. A legitimately slow policy (past longCall) is slowed
// the same way while fast ones are busy.
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
	maxTurns int // long calls on a turn at once

	mu           sync.Mutex
	free         int
	shortRunning int       // short calls holding a slot
	lastShort    time.Time // a short call last held a slot
	turns        int       // long calls on a turn
	nextTurn     time.Time // no turn starts before
	short        []*waiter // waiting for a slot, served first to last
	long         []*waiter // long calls parked while short calls are active
}

func newScheduler(slots, cores int) *scheduler {
	return &scheduler{free: slots, maxTurns: max(cores/4, 1)}
}

// shortActiveLocked reports whether short calls run, wait, or ran within
// longWait.
func (s *scheduler) shortActiveLocked(now time.Time) bool {
	return len(s.short) > 0 || s.shortRunning > 0 || now.Sub(s.lastShort) < longWait
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
	onTurn     bool // a long call running on a turn; guarded by scheduler.mu
	held       bool // guarded by scheduler.mu while the call waits, else by the call
}

type slotKey struct{}

// enter waits for a slot for a new call; the context it returns carries the
// slot to the call's yield points and host calls.
func (s *scheduler) enter(ctx context.Context) (context.Context, *slot, error) {
	sl := &slot{s: s, start: time.Now()}
	if err := s.acquire(ctx, sl); err != nil {
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
		s.releaseLocked(sl, time.Now())
	}
}

// acquire waits until sl holds a slot, or ctx is done: a short call (or a
// long one back from a host call) in the short queue.
func (s *scheduler) acquire(ctx context.Context, sl *slot) error {
	s.mu.Lock()
	if s.free > 0 && len(s.short) == 0 {
		s.free--
		s.grantLocked(sl, time.Now())
		s.mu.Unlock()
		return nil
	}
	w := &waiter{sl: sl, granted: make(chan struct{})}
	s.short = append(s.short, w)
	s.mu.Unlock()
	return s.wait(ctx, w, nil)
}

// wait waits for w's grant, or for ctx. turn, for a parked long call, fires
// when it may try to take a turn.
func (s *scheduler) wait(ctx context.Context, w *waiter, turn *time.Timer) error {
	var tick <-chan time.Time
	if turn != nil {
		tick = turn.C
	}
	for {
		select {
		case <-w.granted:
			return nil
		case <-tick:
			s.mu.Lock()
			now := time.Now()
			switch {
			case w.done:
			case !s.shortActiveLocked(now):
				s.wakeLongLocked(now) // w is among them, if a slot is free
			case s.turns < s.maxTurns && !now.Before(s.nextTurn):
				remove(&s.long, w)
				s.turns++
				w.sl.onTurn = true
				s.short = append([]*waiter{w}, s.short...) // the next freed slot
				if s.free > 0 {
					s.free--
					s.grantLocked(pop(&s.short).sl, now)
					w.done = true
					close(w.granted)
				}
			}
			if !w.done && !w.sl.onTurn {
				turn.Reset(max(time.Until(s.nextTurn), quantum))
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
			if w.sl.onTurn {
				w.sl.onTurn = false
				s.turns--
			}
			return ctx.Err()
		}
	}
}

// grantLocked gives sl a slot it has taken from free or from a caller.
func (s *scheduler) grantLocked(sl *slot, now time.Time) {
	sl.held = true
	sl.sliceStart = now
	if !sl.long {
		s.shortRunning++
		s.lastShort = now
	}
}

// releaseLocked hands the slot sl held to the next call: the first waiting
// short call (or long call on its turn), else parked long calls once short
// calls are quiet, else back to free.
func (s *scheduler) releaseLocked(sl *slot, now time.Time) {
	sl.held = false
	if sl.onTurn {
		sl.onTurn = false
		s.turns--
		s.nextTurn = now.Add(longWait)
	}
	if !sl.long {
		s.shortRunning--
		s.lastShort = now
	}
	if next := pop(&s.short); next != nil {
		s.grantLocked(next.sl, now)
		next.done = true
		close(next.granted)
		return
	}
	s.free++
	if !s.shortActiveLocked(now) {
		s.wakeLongLocked(now)
	}
}

// wakeLongLocked gives the free slots to parked long calls.
func (s *scheduler) wakeLongLocked(now time.Time) {
	for s.free > 0 && len(s.long) > 0 {
		w := pop(&s.long)
		s.free--
		s.grantLocked(w.sl, now)
		w.done = true
		close(w.granted)
	}
}

// yield is called at the call's yield points. It makes a call long once it
// has run for longCall, and parks a long call that has run a quantum while
// short calls are active.
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
	}
	if !sl.long || !s.shortActiveLocked(now) {
		sl.sliceStart = now
		s.mu.Unlock()
		return
	}
	s.releaseLocked(sl, now)
	w := &waiter{sl: sl, granted: make(chan struct{})}
	s.long = append(s.long, w)
	turn := time.NewTimer(max(time.Until(s.nextTurn), quantum))
	s.mu.Unlock()
	defer turn.Stop()
	_ = s.wait(ctx, w, turn) // past the deadline, the guest traps at its next check
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
		_ = sl.s.acquire(ctx, sl)
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
