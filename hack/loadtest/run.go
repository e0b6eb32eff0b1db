package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/wardenhq/warden/hack/internal/cmdline"
)

// run is the whole program: it parses args (args[0] is the program name),
// runs the load test and writes the results to stdout. It returns the exit
// status described in the package comment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var opts Options
	const usage = "usage: loadtest -url URL [-body FILE] [-c N] [-d DURATION] [-rate REQ/S] [flags]\n\nSends POST requests to URL and reports throughput and latency."
	if code, ok := cmdline.Parse("loadtest", usage, args, &opts, stderr); !ok {
		return code
	}
	res, err := loadTest(ctx, &opts)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 2
	}
	res.WriteText(stdout)
	if opts.JSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			fmt.Fprintf(stderr, "loadtest: writing the JSON result: %v\n", err)
			return 2
		}
	}
	if res.Requests == 0 || res.Errors.Total() > 0 {
		return 1
	}
	return 0
}

// loadTest runs the load test opts describes, which must be valid.
func loadTest(ctx context.Context, opts *Options) (*Result, error) {
	var body []byte
	if opts.BodyFile != "" {
		var err error
		if body, err = os.ReadFile(opts.BodyFile); err != nil {
			return nil, fmt.Errorf("reading -body: %w", err)
		}
	}
	var dials atomic.Int64
	client, tr, err := newClient(opts, &dials)
	if err != nil {
		return nil, err
	}
	defer tr.CloseIdleConnections()
	t := &target{
		client:       client,
		url:          opts.URL,
		body:         body,
		contentType:  opts.ContentType,
		expectStatus: opts.ExpectStatus,
	}
	if opts.ExpectBodyContains != "" {
		t.expectBody = []byte(opts.ExpectBodyContains)
	}

	start := time.Now()
	p := plan{start: start, measureStart: start.Add(opts.Warmup), end: start.Add(opts.Warmup + opts.Duration)}
	var (
		stats []*workerStats
		info  openLoopInfo
	)
	if opts.Rate > 0 {
		stats, info = openLoop(ctx, t, opts, p)
	} else {
		stats = closedLoop(ctx, t, opts, p)
	}
	res := summarize(opts, p, stats, info)
	res.BodyBytes = len(body)
	res.Connections = dials.Load()
	res.Interrupted = ctx.Err() != nil
	return res, nil
}

// Result is the outcome of a run, as printed by -json. Durations are in
// microseconds (fields ending in _us) or seconds (_s).
type Result struct {
	URL         string  `json:"url"`
	BodyBytes   int     `json:"body_bytes"`
	ContentType string  `json:"content_type"`
	Protocol    string  `json:"protocol"` // of the successful responses, e.g. "HTTP/1.1 over TLS 1.3"
	Mode        string  `json:"mode"`     // "closed-loop" or "open-loop"
	Concurrency int     `json:"concurrency"`
	Duration    float64 `json:"duration_s"`
	Warmup      float64 `json:"warmup_s"`
	Interrupted bool    `json:"interrupted,omitempty"`

	// Requests counts the measured requests that were answered or failed;
	// OK those that succeeded.
	Requests       uint64      `json:"requests"`
	OK             uint64      `json:"ok"`
	Errors         ErrorCounts `json:"errors"`
	FirstErrors    []string    `json:"first_errors,omitempty"`
	WarmupRequests uint64      `json:"warmup_requests"`
	Connections    int64       `json:"connections"`

	// Elapsed runs from the end of the warm-up to the completion of the
	// last measured request; RPS is OK / Elapsed.
	Elapsed float64 `json:"elapsed_s"`
	RPS     float64 `json:"rps"`
	// Latency of the successful requests: from the scheduled send time in
	// open loop, from the actual send in closed loop.
	Latency Percentiles `json:"latency_us"`

	Open *OpenLoopResult `json:"open_loop,omitempty"`
}

// ErrorCounts counts failed requests by kind.
type ErrorCounts struct {
	Transport uint64 `json:"transport"`
	Status    uint64 `json:"status"`
	Body      uint64 `json:"body"`
}

// Total returns the number of failed requests.
func (e ErrorCounts) Total() uint64 { return e.Transport + e.Status + e.Body }

// OpenLoopResult is the part of a Result specific to the open-loop mode.
type OpenLoopResult struct {
	OfferedRPS float64 `json:"offered_rps"`
	// Scheduled measured requests (due before the end of the run, or before
	// the interruption), of which Sent were sent; NotSent could not be sent in
	// time. Late were sent more than
	// LateThreshold behind schedule.
	Scheduled     int64   `json:"scheduled"`
	Sent          uint64  `json:"sent"`
	NotSent       int64   `json:"not_sent"`
	Late          uint64  `json:"late"`
	LateThreshold float64 `json:"late_threshold_us"`
	// MaxInFlight is the most requests in flight at once, warm-up included;
	// when it reaches -c, late requests waited for a free worker.
	MaxInFlight int64 `json:"max_in_flight"`
	// SendLag is the actual minus the scheduled send time of every sent
	// request; ServiceTime the latency of the successful requests from their
	// actual send.
	SendLag     Percentiles `json:"send_lag_us"`
	ServiceTime Percentiles `json:"service_time_us"`
}

// Percentiles summarizes a Histogram, in microseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func percentiles(h *Histogram) Percentiles {
	return Percentiles{
		P50:  micros(h.Percentile(50)),
		P90:  micros(h.Percentile(90)),
		P95:  micros(h.Percentile(95)),
		P99:  micros(h.Percentile(99)),
		P999: micros(h.Percentile(99.9)),
		Max:  micros(h.Max()),
		Min:  micros(h.Min()),
		Mean: micros(h.Mean()),
	}
}

// summarize merges the workers' stats into a Result.
func summarize(opts *Options, p plan, stats []*workerStats, info openLoopInfo) *Result {
	open := opts.Rate > 0
	all := newWorkerStats(open)
	var lastDone time.Time
	for _, s := range stats {
		all.latency.Merge(s.latency)
		if open {
			all.service.Merge(s.service)
			all.lag.Merge(s.lag)
		}
		for o, c := range s.counts {
			all.counts[o] += c
			if all.firstErr[o] == "" {
				all.firstErr[o] = s.firstErr[o]
			}
		}
		all.late += s.late
		all.warmup += s.warmup
		if s.lastDone.After(lastDone) {
			lastDone = s.lastDone
		}
		if all.proto == "" {
			all.proto = s.proto
		}
	}

	res := &Result{
		URL:         opts.URL,
		ContentType: opts.ContentType,
		Protocol:    all.proto,
		Mode:        "closed-loop",
		Concurrency: opts.Concurrency,
		Duration:    opts.Duration.Seconds(),
		Warmup:      opts.Warmup.Seconds(),
		OK:          all.counts[outcomeOK],
		Errors: ErrorCounts{
			Transport: all.counts[outcomeTransport],
			Status:    all.counts[outcomeStatus],
			Body:      all.counts[outcomeBody],
		},
		WarmupRequests: all.warmup,
		Latency:        percentiles(all.latency),
	}
	res.Requests = res.OK + res.Errors.Total()
	for _, e := range all.firstErr {
		if e != "" {
			res.FirstErrors = append(res.FirstErrors, e)
		}
	}
	if !lastDone.IsZero() {
		elapsed := lastDone.Sub(p.measureStart)
		res.Elapsed = elapsed.Seconds()
		if elapsed > 0 {
			res.RPS = float64(res.OK) / elapsed.Seconds()
		}
	}
	if open {
		res.Mode = "open-loop"
		res.Open = &OpenLoopResult{
			OfferedRPS:    opts.Rate,
			Scheduled:     info.scheduled,
			Sent:          res.Requests,
			NotSent:       info.scheduled - int64(res.Requests),
			MaxInFlight:   info.maxInFlight,
			Late:          all.late,
			LateThreshold: micros(lateThreshold),
			SendLag:       percentiles(all.lag),
			ServiceTime:   percentiles(all.service),
		}
	}
	return res
}

// lateWarnFraction is the share of late requests above which WriteText warns.
const lateWarnFraction = 0.01

// WriteText prints the result for people.
func (r *Result) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	proto := r.Protocol
	if proto == "" {
		proto = "HTTP/1.1 (no successful response)"
	}
	p("target       POST %s (%d-byte body, %s)\n", r.URL, r.BodyBytes, r.ContentType)
	p("client       %s, HTTP/2 disabled, keep-alive, connections opened: %d\n", proto, r.Connections)
	measured := fmt.Sprintf("%v measured after %v warm-up", seconds(r.Duration), seconds(r.Warmup))
	if r.Open == nil {
		p("mode         closed loop, %d workers, %s\n", r.Concurrency, measured)
	} else {
		p("mode         open loop, %g req/s offered, at most %d in flight, %s\n", r.Open.OfferedRPS, r.Concurrency, measured)
	}
	if r.Interrupted {
		p("             INTERRUPTED before the end\n")
	}
	p("requests     %d measured (%d more in warm-up, not counted)\n", r.Requests, r.WarmupRequests)
	p("errors       %d (transport %d, status %d, body %d)\n", r.Errors.Total(), r.Errors.Transport, r.Errors.Status, r.Errors.Body)
	for _, e := range r.FirstErrors {
		p("  first      %s\n", e)
	}
	p("throughput   %.1f req/s (successful requests over %.3fs)\n", r.RPS, r.Elapsed)
	if r.Open == nil {
		p("latency      %s   (successful requests)\n", r.Latency)
		return
	}
	o := r.Open
	p("schedule     %d scheduled, %d sent, %d not sent, %d late (sent >%v behind schedule), at most %d in flight\n",
		o.Scheduled, o.Sent, o.NotSent, o.Late, lateThreshold, o.MaxInFlight)
	p("send lag     %s\n", o.SendLag)
	p("latency      %s   (successful requests, from the scheduled send time)\n", r.Latency)
	p("service      %s   (successful requests, from the actual send)\n", o.ServiceTime)
	switch {
	case r.Interrupted, o.NotSent == 0 && float64(o.Late) <= lateWarnFraction*float64(o.Sent):
	case o.MaxInFlight >= int64(r.Concurrency):
		p("WARNING      behind schedule, all %d workers busy at some point: the target stalled or cannot sustain -rate (or -c is too low)\n", r.Concurrency)
	default:
		p("WARNING      behind schedule with workers to spare (at most %d in flight): the load tool was short of CPU\n", o.MaxInFlight)
	}
}

// String formats the percentiles on one line.
func (p Percentiles) String() string {
	return fmt.Sprintf("p50 %-8v p90 %-8v p95 %-8v p99 %-8v p99.9 %-8v max %v",
		short(p.P50), short(p.P90), short(p.P95), short(p.P99), short(p.P999), short(p.Max))
}

// short formats a duration in microseconds with three or so significant
// digits.
func short(us float64) time.Duration {
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d < time.Microsecond:
		return d
	case d < 100*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d < 100*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Millisecond)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
