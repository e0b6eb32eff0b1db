package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one measure run found: one LevelResult per concurrency
// level, in the order of -c. It is what -json writes and compare reads.
type Result struct {
	Label     string    `json:"label"`
	Namespace string    `json:"namespace"`
	Started   time.Time `json:"started"`
	// LoadAverage is /proc/loadavg's first three fields at the start.
	LoadAverage string `json:"loadAverage"`
	CPUs        int    `json:"cpus"`
	// Warmup and Duration are the -warmup and -d of every level.
	Warmup   time.Duration `json:"warmupNs"`
	Duration time.Duration `json:"durationNs"`
	Levels   []LevelResult `json:"levels"`
}

// LevelResult is one concurrency level. Latencies are of the measured
// creations that succeeded.
type LevelResult struct {
	Concurrency int `json:"concurrency"`
	// Creates succeeded in the measured window; Errors failed there.
	Creates int `json:"creates"`
	Errors  int `json:"errors"`
	// ErrorSamples maps "reason: message" to how often it happened.
	ErrorSamples map[string]int `json:"errorSamples,omitempty"`
	// WarmupCreates succeeded during the warm-up.
	WarmupCreates int `json:"warmupCreates"`
	// Elapsed is from the end of the warm-up to the last measured answer.
	Elapsed   time.Duration `json:"elapsedNs"`
	PerSecond float64       `json:"perSecond"`
	P50       time.Duration `json:"p50Ns"`
	P95       time.Duration `json:"p95Ns"`
	P99       time.Duration `json:"p99Ns"`
	Max       time.Duration `json:"maxNs"`
	// CPU is the CPU time each process of -cpu-of, and admissionbench
	// itself, used in the measured window; MachineBusy is the share of
	// all the machine's CPUs that was busy then (0 to 1).
	// CPU also holds, under "rest of the machine", the busy time none of
	// them accounts for.
	CPU         map[string]time.Duration `json:"cpuNs,omitempty"`
	MachineBusy float64                  `json:"machineBusy"`
	// TCPOpensPerCreate is the TCP connections opened from the tool's
	// network namespace (where the API server runs, on the local cluster)
	// during the measured window, per measured creation; -1 when unknown.
	// A webhook client that cannot keep its connections open shows here.
	TCPOpensPerCreate float64 `json:"tcpOpensPerCreate"`
	// ValidatingAdmission is the mean time of the API server's validating
	// admission step per CREATE, and Webhook the mean duration of one
	// validating webhook call, from the API server's metrics over the
	// whole level (warm-up included); zero when nothing was observed.
	ValidatingAdmission time.Duration `json:"validatingAdmissionNs"`
	Webhook             time.Duration `json:"webhookNs"`
	WebhookCalls        float64       `json:"webhookCalls"`
	// EvaluationsPerCreate is the policy server's evaluations during the
	// level over the creations that succeeded in it (warm-up included);
	// -1 without -policy-server-metrics.
	EvaluationsPerCreate float64 `json:"evaluationsPerCreate"`
	// Vanished counts measured pods that were gone before the tool
	// deleted them: the pod garbage collector deletes pods bound to a node
	// that does not exist about a minute after it first sees them.
	Vanished int `json:"vanished"`
}

// percentile returns the nearest-rank percentile p (0 < p <= 100) of
// sorted, or 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// summarize fills the latency fields of l from the measured latencies,
// which it sorts.
func (l *LevelResult) summarize(latencies []time.Duration) {
	slices.Sort(latencies)
	l.Creates = len(latencies)
	l.P50 = percentile(latencies, 50)
	l.P95 = percentile(latencies, 95)
	l.P99 = percentile(latencies, 99)
	if len(latencies) > 0 {
		l.Max = latencies[len(latencies)-1]
	}
	if l.Elapsed > 0 {
		l.PerSecond = float64(l.Creates) / l.Elapsed.Seconds()
	}
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// WriteText prints r as a table, with a line on each level's CPU use and
// errors.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "admissionbench: %s: pod CREATE in namespace %s, %d CPUs, load average %s at the start (%s)\n",
		r.label(), r.Namespace, r.CPUs, r.LoadAverage, r.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "each level: %v warm-up, then %v measured (ms; create/s over the measured window)\n", r.Warmup, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tcreates\terrors\tcreate/s\tp50\tp95\tp99\tmax\t")
	for _, l := range r.Levels {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t\n",
			l.Concurrency, l.Creates, l.Errors, l.PerSecond, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max))
	}
	tw.Flush()
	for _, l := range r.Levels {
		fmt.Fprintf(w, "%d clients: %s\n", l.Concurrency, l.cpuLine(r.CPUs))
		if l.ValidatingAdmission > 0 || l.Webhook > 0 {
			fmt.Fprintf(w, "%d clients: API server: validating admission %s ms per CREATE", l.Concurrency, ms(l.ValidatingAdmission))
			if l.WebhookCalls > 0 {
				fmt.Fprintf(w, ", %.0f webhook calls of %s ms on average", l.WebhookCalls, ms(l.Webhook))
				if n := l.Creates + l.WarmupCreates + l.Errors; n > 0 {
					fmt.Fprintf(w, " (%.1f per create)", l.WebhookCalls/float64(n))
				}
			}
			fmt.Fprintln(w)
		}
		if l.EvaluationsPerCreate >= 0 {
			fmt.Fprintf(w, "%d clients: %.2f policy evaluations per pod created\n", l.Concurrency, l.EvaluationsPerCreate)
		}
		if l.Vanished > 0 {
			fmt.Fprintf(w, "%d clients: %d pods were deleted by someone else (the pod garbage collector) before the end of the level\n", l.Concurrency, l.Vanished)
		}
		keys := make([]string, 0, len(l.ErrorSamples))
		for k := range l.ErrorSamples {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%d clients: %d errors: %s\n", l.Concurrency, l.ErrorSamples[k], k)
		}
	}
}

func (r *Result) label() string {
	if r.Label == "" {
		return "run"
	}
	return r.Label
}

// cpuLine says how busy the machine and each process were, in CPU time per
// measured creation and in CPUs: a process's CPU time over the measured
// window's, which tells the work each pod costs it from the work it does
// anyway, whatever the rate (a controller's resyncs, the scheduler's cache).
func (l *LevelResult) cpuLine(cpus int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine %.0f%% busy (%.2f of %d CPUs)", 100*l.MachineBusy, l.MachineBusy*float64(cpus), cpus)
	names := make([]string, 0, len(l.CPU))
	for n := range l.CPU {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 0 && l.Creates > 0 && l.Elapsed > 0 {
		b.WriteString("; CPU µs per measured create (and CPUs used):")
		for i, n := range names {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s %.0f (%.2f)", sep, n, float64(l.CPU[n].Microseconds())/float64(l.Creates),
				l.CPU[n].Seconds()/l.Elapsed.Seconds())
		}
	}
	if l.TCPOpensPerCreate >= 0 {
		fmt.Fprintf(&b, "; %.2f TCP connections opened per create", l.TCPOpensPerCreate)
	}
	return b.String()
}

// WriteComparison prints base and with side by side as a Markdown table:
// per level, each run's p50/p95/p99 and throughput, and the difference of
// with's p99 (and p50) from base's, in percent.
func WriteComparison(w io.Writer, base, with *Result) error {
	fmt.Fprintf(w, "| clients | %s: p50 / p95 / p99 (ms) | %s: p50 / p95 / p99 (ms) | p50 overhead | p99 overhead | create/s: %s / %s |\n",
		base.label(), with.label(), base.label(), with.label())
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---|")
	matched := 0
	for _, bl := range base.Levels {
		i := slices.IndexFunc(with.Levels, func(l LevelResult) bool { return l.Concurrency == bl.Concurrency })
		if i < 0 {
			continue
		}
		wl := with.Levels[i]
		matched++
		fmt.Fprintf(w, "| %d | %s / %s / %s | %s / %s / %s | %s | %s | %.0f / %.0f |\n", bl.Concurrency,
			ms(bl.P50), ms(bl.P95), ms(bl.P99), ms(wl.P50), ms(wl.P95), ms(wl.P99),
			overhead(bl.P50, wl.P50), overhead(bl.P99, wl.P99), bl.PerSecond, wl.PerSecond)
	}
	if matched == 0 {
		return fmt.Errorf("%s and %s have no concurrency level in common", base.label(), with.label())
	}
	return nil
}

// overhead is how much longer with is than base, in percent, signed.
func overhead(base, with time.Duration) string {
	if base <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.0f%%", 100*(float64(with)-float64(base))/float64(base))
}
