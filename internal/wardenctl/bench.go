package wardenctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// BenchOptions are the flags of bench: run's, and the measurement's.
type BenchOptions struct {
	Run RunOptions
	// MeasurementTime is how long the samples should take in total; a slow
	// policy takes longer, since every sample runs at least once.
	MeasurementTime time.Duration
	// WarmUpTime is how long the policy runs before measuring.
	WarmUpTime time.Duration
	// NumSamples is how many samples are measured.
	NumSamples int
	// NumResamples is how many bootstrap resamples estimate the confidence
	// interval of the mean.
	NumResamples int
	// DumpDir, when set, keeps the results there and compares with the
	// previous run's.
	DumpDir string

	measurement, warmUp string // as given: seconds or a duration
}

// Defaults of bench, those of kwctl's benchmark library.
const (
	defaultMeasurementTime = 5 * time.Second
	defaultWarmUpTime      = 3 * time.Second
	defaultNumSamples      = 100
	defaultNumResamples    = 100_000
	defaultDumpDir         = "target/wardenctl-bench"
)

// AddFlags registers the flags, with kwctl's names.
func (o *BenchOptions) AddFlags(cmd *cobra.Command) {
	o.Run.AddFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.measurement, "measurement-time", strconv.Itoa(int(defaultMeasurementTime/time.Second)), "How long the measurement should take, in seconds (or a duration such as 500ms)")
	f.StringVar(&o.warmUp, "warm-up-time", strconv.Itoa(int(defaultWarmUpTime/time.Second)), "How long to warm up, in seconds (or a duration such as 500ms)")
	f.IntVar(&o.NumSamples, "num-samples", defaultNumSamples, "How many samples to measure")
	f.IntVar(&o.NumResamples, "num-resamples", defaultNumResamples, "How many bootstrap resamples estimate the confidence interval")
	f.StringVar(&o.DumpDir, "dump-results-to-disk", "", "Keep the results in a directory (default "+defaultDumpDir+" when the flag has no value) and compare with the previous run")
	f.Lookup("dump-results-to-disk").NoOptDefVal = defaultDumpDir
}

// Validate parses and checks the measurement flags.
func (o *BenchOptions) Validate() error {
	var err error
	if o.MeasurementTime, err = parseSeconds(o.measurement); err != nil {
		return &usageError{fmt.Errorf("--measurement-time: %w", err)}
	}
	if o.WarmUpTime, err = parseSeconds(o.warmUp); err != nil {
		return &usageError{fmt.Errorf("--warm-up-time: %w", err)}
	}
	if o.NumSamples < 2 {
		return &usageError{fmt.Errorf("--num-samples must be at least 2, not %d", o.NumSamples)}
	}
	if o.NumResamples < 1 {
		return &usageError{fmt.Errorf("--num-resamples must be at least 1, not %d", o.NumResamples)}
	}
	return nil
}

// parseSeconds reads kwctl's whole seconds, or any number of seconds, or a
// Go duration.
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("invalid number of seconds %q", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid time %q: give seconds (5, 0.5) or a duration (500ms)", s)
	}
	return d, nil
}

func (a *app) benchCommand() *cobra.Command {
	o := BenchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [flags] --request-path <file> <uri|sha-prefix|path|policies.yaml>",
		Short: "Benchmark a policy",
		Long: "Evaluate a request with a policy repeatedly and print the time per evaluation: " +
			"the mean with its 95% confidence interval (bootstrap), and the spread of the samples. " +
			"Takes the flags of run.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			p, err := a.prepare(ctx, argv[0], &o.Run)
			if err != nil {
				return err
			}
			defer p.sess.Close(ctx)
			err = a.benchPolicies(ctx, p, argv[0], o)
			if ferr := p.hostCaps.finish(ctx, a.logger()); err == nil {
				err = ferr
			}
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// benchPolicies benchmarks every policy with the request and reports the
// results.
func (a *app) benchPolicies(ctx context.Context, p *prepared, arg string, o BenchOptions) error {
	for _, pol := range p.policies {
		label := arg
		if len(p.policies) > 1 || isYAMLFile(arg) {
			label = pol.ID
		}
		eval := func() error {
			_, err := p.sess.evaluate(ctx, pol.ID, p.req, p.raw)
			return err
		}
		res, err := measure(ctx, eval, o)
		if err != nil {
			return fmt.Errorf("benchmarking %s: %w", label, err)
		}
		res.Label = label
		if err := a.reportBench(res, o.DumpDir); err != nil {
			return err
		}
	}
	return nil
}

// benchResult is the measurement of one policy.
type benchResult struct {
	Label      string    `json:"label"`
	Iterations int       `json:"iterationsPerSample"`
	Samples    []float64 `json:"samplesNs"` // ns per evaluation, one per sample
	Mean       float64   `json:"meanNs"`
	Lower      float64   `json:"lowerNs"` // bounds of the 95% confidence interval of the mean
	Upper      float64   `json:"upperNs"`
	Min        float64   `json:"minNs"`
	Median     float64   `json:"medianNs"`
	Max        float64   `json:"maxNs"`
	StdDev     float64   `json:"stdDevNs"`
}

// measure warms eval up, then times o.NumSamples samples of the same
// number of evaluations each, chosen from the warm-up so that the samples
// fill o.MeasurementTime.
func measure(ctx context.Context, eval func() error, o BenchOptions) (*benchResult, error) {
	start := time.Now()
	warm := 0
	for warm == 0 || time.Since(start) < o.WarmUpTime {
		if err := eval(); err != nil {
			return nil, err
		}
		warm++
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	perEval := float64(time.Since(start)) / float64(warm)
	iters := int(float64(o.MeasurementTime) / float64(o.NumSamples) / math.Max(perEval, 1))
	iters = max(iters, 1)
	samples := make([]float64, o.NumSamples)
	for i := range samples {
		t := time.Now()
		for range iters {
			if err := eval(); err != nil {
				return nil, err
			}
		}
		samples[i] = float64(time.Since(t)) / float64(iters)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	r := summarize(samples, o.NumResamples, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15)))
	r.Iterations = iters
	return r, nil
}

// summarize computes the statistics of samples: mean, spread, and the 95%
// bootstrap confidence interval of the mean from resamples resamples.
func summarize(samples []float64, resamples int, rng *rand.Rand) *benchResult {
	n := len(samples)
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	r := &benchResult{Samples: samples, Min: sorted[0], Max: sorted[n-1], Mean: mean(samples)}
	if n%2 == 1 {
		r.Median = sorted[n/2]
	} else {
		r.Median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	var ss float64
	for _, s := range samples {
		ss += (s - r.Mean) * (s - r.Mean)
	}
	if n > 1 {
		r.StdDev = math.Sqrt(ss / float64(n-1))
	}
	means := make([]float64, resamples)
	for i := range means {
		var sum float64
		for range n {
			sum += samples[rng.IntN(n)]
		}
		means[i] = sum / float64(n)
	}
	slices.Sort(means)
	r.Lower, r.Upper = percentile(means, 0.025), percentile(means, 0.975)
	return r
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// percentile returns the p-quantile of sorted values, interpolated.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := p * float64(len(sorted)-1)
	i := int(pos)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(i)
	return sorted[i] + frac*(sorted[i+1]-sorted[i])
}

// formatNs prints a time in nanoseconds with four significant digits and a
// unit that keeps it readable.
func formatNs(ns float64) string {
	switch {
	case ns < 1e3:
		return strconv.FormatFloat(ns, 'f', digits(ns), 64) + " ns"
	case ns < 1e6:
		return strconv.FormatFloat(ns/1e3, 'f', digits(ns/1e3), 64) + " µs"
	case ns < 1e9:
		return strconv.FormatFloat(ns/1e6, 'f', digits(ns/1e6), 64) + " ms"
	}
	return strconv.FormatFloat(ns/1e9, 'f', digits(ns/1e9), 64) + " s"
}

// digits is the number of decimals that leaves four significant digits.
func digits(v float64) int {
	switch {
	case v >= 100:
		return 1
	case v >= 10:
		return 2
	}
	return 3
}

// reportBench prints a result and, with dumpDir, saves it and compares it
// with the previous one saved under the same label.
func (a *app) reportBench(r *benchResult, dumpDir string) error {
	w := a.out
	fmt.Fprintf(w, "%s\n", r.Label)
	fmt.Fprintf(w, "  time:    [%s %s %s]  mean with its 95%% confidence interval\n", formatNs(r.Lower), formatNs(r.Mean), formatNs(r.Upper))
	fmt.Fprintf(w, "  spread:  min %s, median %s, max %s, std dev %s (%.1f%%)\n",
		formatNs(r.Min), formatNs(r.Median), formatNs(r.Max), formatNs(r.StdDev), 100*r.StdDev/r.Mean)
	fmt.Fprintf(w, "  samples: %d of %d evaluations\n", len(r.Samples), r.Iterations)
	if dumpDir == "" {
		return nil
	}
	path := filepath.Join(dumpDir, safeName(r.Label)+".json")
	if prev, err := readBenchResult(path); err == nil {
		fmt.Fprintf(w, "  change:  %+.2f%% (previous mean %s)\n", 100*(r.Mean-prev.Mean)/prev.Mean, formatNs(prev.Mean))
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dumpDir, 0o755); err != nil {
		return fmt.Errorf("saving the results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("saving the results: %w", err)
	}
	_, err = fmt.Fprintf(w, "  saved:   %s\n", path)
	return err
}

func readBenchResult(path string) (*benchResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var r benchResult
	if err := json.Unmarshal(b, &r); err != nil || r.Mean <= 0 {
		return nil, fmt.Errorf("reading the previous results %s: not a wardenctl bench result", path)
	}
	return &r, nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// safeName turns a label (often a URI) into a file name.
func safeName(label string) string {
	s := strings.Trim(unsafeChars.ReplaceAllString(label, "_"), "_")
	if s == "" {
		return "policy"
	}
	return s
}
