package main

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl(2)'s PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// sleepPrecisely sleeps for d, give or take a few microseconds.
//
// Go timers wake an otherwise idle process on millisecond boundaries only,
// which would delay open-loop requests by up to 1ms. Instead the calling
// goroutine sleeps in nanosleep(2), pinned to its OS thread for the duration,
// after setting that thread's timer slack to 1ns (the default 50µs would be
// added to every sleep). The slack stays set: the runtime's own timed waits on
// that thread then become as precise, which does no harm in a load tool.
func sleepPrecisely(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Best effort: on failure the sleep is merely less precise.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
