package main

import (
	"bytes"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// lateThreshold is how far behind its scheduled time an open-loop request may
// leave before it counts as late.
const lateThreshold = time.Millisecond

// plan is the timeline of a run: warm-up from start to measureStart, then
// measurement until end. No request is sent at or after end.
type plan struct {
	start, measureStart, end time.Time
}

// workerStats is what one worker saw. Only its worker writes it, until the
// run is over.
type workerStats struct {
	// latency holds successful measured requests: from the scheduled send
	// time in open loop, from the actual send in closed loop. service (from
	// the actual send) and lag (actual minus scheduled send time) are kept in
	// open loop only.
	latency, service, lag *Histogram
	counts                [numOutcomes]uint64
	late                  uint64
	warmup                uint64
	lastDone              time.Time // completion of the last measured request
	proto                 string
	firstErr              [numOutcomes]string
}

func newWorkerStats(open bool) *workerStats {
	s := &workerStats{latency: new(Histogram)}
	if open {
		s.service, s.lag = new(Histogram), new(Histogram)
	}
	return s
}

// record accounts for one request sent at sent, scheduled at intended (equal
// to sent in closed loop) and completed at done.
func (s *workerStats) record(r reply, measured bool, intended, sent, done time.Time) {
	if r.proto != "" {
		s.proto = r.proto
	}
	if !measured {
		s.warmup++
		return
	}
	s.counts[r.outcome]++
	s.lastDone = done
	if s.lag != nil {
		lag := sent.Sub(intended)
		s.lag.Record(lag)
		if lag > lateThreshold {
			s.late++
		}
	}
	if r.outcome != outcomeOK {
		if s.firstErr[r.outcome] == "" {
			s.firstErr[r.outcome] = r.detail
		}
		return
	}
	s.latency.Record(done.Sub(intended))
	if s.service != nil {
		s.service.Record(done.Sub(sent))
	}
}

// closedLoop runs opts.Concurrency workers that send back to back until p.end,
// ctx is canceled or opts.MaxRequests measured requests were sent.
func closedLoop(ctx context.Context, t *target, opts *Options, p plan) []*workerStats {
	stats := make([]*workerStats, opts.Concurrency)
	var measured atomic.Int64
	var wg sync.WaitGroup
	for w := range stats {
		s := newWorkerStats(false)
		stats[w] = s
		wg.Go(func() {
			var buf bytes.Buffer
			for ctx.Err() == nil {
				sent := time.Now()
				if !sent.Before(p.end) {
					return
				}
				isMeasured := !sent.Before(p.measureStart)
				if isMeasured && opts.MaxRequests > 0 && measured.Add(1) > opts.MaxRequests {
					return
				}
				r := t.send(ctx, &buf, s.proto == "")
				done := time.Now()
				if errCanceled(ctx, r) {
					return
				}
				s.record(r, isMeasured, sent, sent, done)
			}
		})
	}
	wg.Wait()
	return stats
}

// schedule is the open-loop timetable: request i is due at start + i*interval.
type schedule struct {
	start    time.Time
	interval float64 // nanoseconds
}

// offset returns when request i is due, relative to start.
func (s schedule) offset(i int64) time.Duration {
	return time.Duration(float64(i) * s.interval)
}

// firstAtOrAfter returns the first request due at or after start+d.
func (s schedule) firstAtOrAfter(d time.Duration) int64 {
	i := max(int64(math.Ceil(float64(d)/s.interval)), 0)
	for i > 0 && s.offset(i-1) >= d {
		i--
	}
	for s.offset(i) < d {
		i++
	}
	return i
}

// openLoopInfo is what an open-loop run knows beyond the workers' stats.
type openLoopInfo struct {
	scheduled   int64 // measured requests scheduled
	maxInFlight int64 // most requests in flight at once
}

// openLoop sends requests at opts.Rate from p.start to p.end, with at most
// opts.Concurrency in flight.
//
// The workers take turns as leader (leader/follower): the leader holds the
// index of the next request, sleeps until it is due, passes the lead on and
// sends that request itself. Nothing stands between the wake-up and the send,
// so the send lag stays within a few microseconds; handing the request to
// another goroutine would add a thread wake-up (tens of microseconds). When
// every worker is busy the lead waits for the first one to finish, which then
// sends at once, late.
func openLoop(ctx context.Context, t *target, opts *Options, p plan) ([]*workerStats, openLoopInfo) {
	sched := schedule{start: p.start, interval: float64(time.Second) / opts.Rate}
	first := sched.firstAtOrAfter(p.measureStart.Sub(p.start))
	last := sched.firstAtOrAfter(p.end.Sub(p.start)) // exclusive
	if opts.MaxRequests > 0 {
		last = min(last, first+opts.MaxRequests)
	}

	// lead carries the index of the next request; whoever receives it leads,
	// and is the only one to send on it, so sends never block. last means
	// done: pass it on and stop.
	lead := make(chan int64, 1)
	lead <- 0
	// stop is where the schedule ended: last, or the first request not due
	// yet when the cancellation of ctx was noticed. Only the leader writes it.
	stop := last
	var inFlight, maxInFlight atomic.Int64
	stats := make([]*workerStats, opts.Concurrency)
	var wg sync.WaitGroup
	for w := range stats {
		s := newWorkerStats(true)
		stats[w] = s
		wg.Go(func() {
			var buf bytes.Buffer
			for {
				i := <-lead
				if i >= last {
					lead <- last
					return
				}
				intended := sched.start.Add(sched.offset(i))
				sleepUntil(ctx, intended)
				sent := time.Now()
				if ctx.Err() != nil || !sent.Before(p.end) {
					if ctx.Err() != nil {
						stop = min(stop, sched.firstAtOrAfter(sent.Sub(sched.start)))
					}
					lead <- last // not sent: the run is over
					return
				}
				lead <- i + 1
				if n := inFlight.Add(1); n > maxInFlight.Load() {
					raise(&maxInFlight, n)
				}
				r := t.send(ctx, &buf, s.proto == "")
				done := time.Now()
				inFlight.Add(-1)
				if errCanceled(ctx, r) {
					continue
				}
				s.record(r, i >= first, intended, sent, done)
			}
		})
	}
	wg.Wait()
	return stats, openLoopInfo{scheduled: max(stop-first, 0), maxInFlight: maxInFlight.Load()}
}

// raise sets v to n if n is larger.
func raise(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// sleepUntil sleeps until t or until ctx is canceled, whichever comes first.
func sleepUntil(ctx context.Context, t time.Time) {
	for ctx.Err() == nil {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		sleepPrecisely(min(d, 10*time.Millisecond)) // short enough to notice ctx
	}
}
