package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The modes of -mode.
const (
	modeMeasure        = "measure"
	modeFirstRejection = "first-rejection"
	modeCompare        = "compare"
)

// Bounds of the flags, so that a typing error cannot start a run of hours
// or of thousands of clients.
const (
	maxConcurrency = 1000
	maxDuration    = 10 * time.Minute
	maxCreates     = 1_000_000
)

// Options are the flags of admissionbench. Validate parses -c into Levels.
type Options struct {
	Mode       string
	Kubeconfig string
	Namespace  string
	// KeepNamespace leaves the namespace (emptied of pods) at the end.
	KeepNamespace bool

	// Concurrency is -c as given; Levels is what Validate parsed of it.
	Concurrency string
	Levels      []int
	Duration    time.Duration
	Warmup      time.Duration
	MaxCreates  int
	Timeout     time.Duration
	Label       string
	// CPUOf names processes (by /proc/<pid>/comm) whose CPU time each
	// level reports.
	CPUOf string
	// PolicyServerMetrics is the URL of a policy server's /metrics.
	PolicyServerMetrics string
	JSON                string

	// First rejection.
	Since         string
	SinceTime     time.Time
	ExpectMessage string
	Poll          time.Duration
	Wait          time.Duration

	// Compare.
	Base, With string
}

// AddFlags registers the options on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Mode, "mode", modeMeasure, "measure, first-rejection or compare (see the package documentation)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "`path` of the kubeconfig (required but in compare mode)")
	fs.StringVar(&o.Namespace, "namespace", "admissionbench", "`namespace` the pods are created in; created if missing, deleted at the end")
	fs.BoolVar(&o.KeepNamespace, "keep-namespace", false, "leave the namespace (without pods) at the end")

	fs.StringVar(&o.Concurrency, "c", "1,10,50", "comma-separated concurrency `levels`: clients creating pods back to back")
	fs.DurationVar(&o.Duration, "d", 20*time.Second, "measured duration of each level")
	fs.DurationVar(&o.Warmup, "warmup", 3*time.Second, "warm-up of each level before the measurement; its creations are not counted")
	fs.IntVar(&o.MaxCreates, "n", 20000, "if > 0, end a level after this many measured creations")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "timeout of one API request")
	fs.StringVar(&o.Label, "label", "", "name of the run in the output and the JSON, e.g. \"no webhook\"")
	fs.StringVar(&o.CPUOf, "cpu-of", "kube-apiserver,etcd,policy-server", "comma-separated process `names` (/proc/PID/comm) whose CPU time each level reports")
	fs.StringVar(&o.PolicyServerMetrics, "policy-server-metrics", "", "`URL` of a policy server's /metrics: report the policy evaluations per creation")
	fs.StringVar(&o.JSON, "json", "", "also write the results to this `file` as JSON (for -mode compare)")

	fs.StringVar(&o.Since, "since", "", "first-rejection: Unix `time` in seconds (date +%s.%N) the time to the rejection is counted from (default: the start)")
	fs.StringVar(&o.ExpectMessage, "expect-message", "", "first-rejection: a `substring` the denial must hold (default: any webhook denial)")
	fs.DurationVar(&o.Poll, "poll", 50*time.Millisecond, "first-rejection: pause between two dry-run creations")
	fs.DurationVar(&o.Wait, "wait", 5*time.Minute, "first-rejection: give up after this long")

	fs.StringVar(&o.Base, "base", "", "compare: the JSON `file` of the run without webhooks")
	fs.StringVar(&o.With, "with", "", "compare: the JSON `file` of the run with webhooks")
}

// Validate checks the options and parses -c and -since.
func (o *Options) Validate() error {
	var errs []error
	switch o.Mode {
	case modeMeasure, modeFirstRejection:
		if o.Kubeconfig == "" {
			errs = append(errs, fmt.Errorf("-kubeconfig is required in %s mode", o.Mode))
		}
		if o.Namespace == "" {
			errs = append(errs, errors.New("-namespace must not be empty"))
		}
	case modeCompare:
		if o.Base == "" || o.With == "" {
			errs = append(errs, errors.New("compare mode needs -base and -with"))
		}
	default:
		errs = append(errs, fmt.Errorf("-mode %q: want %s, %s or %s", o.Mode, modeMeasure, modeFirstRejection, modeCompare))
	}
	levels, err := parseLevels(o.Concurrency)
	if err != nil {
		errs = append(errs, err)
	}
	o.Levels = levels
	if o.Duration <= 0 || o.Duration > maxDuration {
		errs = append(errs, fmt.Errorf("-d %v: want more than 0 and at most %v", o.Duration, maxDuration))
	}
	if o.Warmup < 0 || o.Warmup > maxDuration {
		errs = append(errs, fmt.Errorf("-warmup %v: want 0 to %v", o.Warmup, maxDuration))
	}
	if o.MaxCreates < 0 || o.MaxCreates > maxCreates {
		errs = append(errs, fmt.Errorf("-n %d: want 0 (no limit but -d) to %d", o.MaxCreates, maxCreates))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %v: must be positive", o.Timeout))
	}
	if o.Poll <= 0 {
		errs = append(errs, fmt.Errorf("-poll %v: must be positive", o.Poll))
	}
	if o.Wait <= 0 || o.Wait > maxDuration {
		errs = append(errs, fmt.Errorf("-wait %v: want more than 0 and at most %v", o.Wait, maxDuration))
	}
	if o.Since != "" {
		secs, err := strconv.ParseFloat(o.Since, 64)
		if err != nil || secs <= 0 {
			errs = append(errs, fmt.Errorf("-since %q: want Unix seconds, as date +%%s.%%N prints them", o.Since))
		} else {
			whole := int64(secs)
			o.SinceTime = time.Unix(whole, int64((secs-float64(whole))*1e9))
		}
	}
	return errors.Join(errs...)
}

// parseLevels parses -c: distinct positive concurrencies, in the order given.
func parseLevels(s string) ([]int, error) {
	var levels []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxConcurrency {
			return nil, fmt.Errorf("-c %q: want comma-separated numbers from 1 to %d", s, maxConcurrency)
		}
		if seen[n] {
			return nil, fmt.Errorf("-c %q: %d is there twice", s, n)
		}
		seen[n] = true
		levels = append(levels, n)
	}
	return levels, nil
}

// processNames splits -cpu-of.
func (o *Options) processNames() []string {
	var names []string
	for _, n := range strings.Split(o.CPUOf, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}
