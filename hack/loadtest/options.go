package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"time"
)

// Default worker counts: closed-loop concurrency, and the in-flight limit of
// the open-loop mode, which must be high enough that a short stall of the
// target does not stop the schedule.
const (
	defaultConcurrency     = 20
	defaultRateConcurrency = 64
)

// Options are the loadtest flags. Validate fills in defaults that depend on
// other flags; call it before reading Concurrency.
type Options struct {
	URL                string
	BodyFile           string
	ContentType        string
	Concurrency        int
	Duration           time.Duration
	Warmup             time.Duration
	Rate               float64
	MaxRequests        int64
	Timeout            time.Duration
	CACertFile         string
	Insecure           bool
	ExpectStatus       int
	ExpectBodyContains string
	JSON               bool
}

// AddFlags registers the options on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "url", "", "target `URL`, e.g. https://127.0.0.1:3000/validate/labels (required)")
	fs.StringVar(&o.BodyFile, "body", "", "`file` holding the POST body (default: empty body)")
	fs.StringVar(&o.ContentType, "content-type", "application/json", "Content-Type of the body")
	fs.IntVar(&o.Concurrency, "c", 0, fmt.Sprintf("closed loop: number of workers; with -rate: maximum requests in flight (default %d, or %d with -rate)", defaultConcurrency, defaultRateConcurrency))
	fs.DurationVar(&o.Duration, "d", 10*time.Second, "measured duration")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "warm-up duration before the measurement; its results are discarded")
	fs.Float64Var(&o.Rate, "rate", 0, "if > 0, open loop: offered rate in requests/s, latency measured from the scheduled send time")
	fs.Int64Var(&o.MaxRequests, "max-requests", 0, "if > 0, stop after this many measured requests")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of one request, body included")
	fs.StringVar(&o.CACertFile, "cacert", "", "PEM `file` of the CA certificates to trust (default: the system roots)")
	fs.BoolVar(&o.Insecure, "insecure", false, "do not verify the server certificate")
	fs.IntVar(&o.ExpectStatus, "expect-status", 200, "HTTP status a successful request answers with; others count as errors")
	fs.StringVar(&o.ExpectBodyContains, "expect-body-contains", "", "if set, a response body without this `substring` counts as an error")
	fs.BoolVar(&o.JSON, "json", false, "also print the results as one JSON object")
}

// Validate checks the options and fills in the default concurrency.
func (o *Options) Validate() error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("-url is required"))
	} else if u, err := url.Parse(o.URL); err != nil {
		errs = append(errs, fmt.Errorf("-url: %w", err))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("-url %q: want http:// or https:// and a host", o.URL))
	}
	if o.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("-c %d: must not be negative", o.Concurrency))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("-d %v: must be positive", o.Duration))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("-warmup %v: must not be negative", o.Warmup))
	}
	if o.Rate < 0 || o.Rate > 1e7 || o.Rate != o.Rate {
		errs = append(errs, fmt.Errorf("-rate %v: want 0 (closed loop) up to 1e7", o.Rate))
	}
	if o.MaxRequests < 0 {
		errs = append(errs, fmt.Errorf("-max-requests %d: must not be negative", o.MaxRequests))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %v: must be positive", o.Timeout))
	}
	if o.CACertFile != "" && o.Insecure {
		errs = append(errs, errors.New("-cacert and -insecure exclude each other"))
	}
	if o.ExpectStatus < 100 || o.ExpectStatus > 599 {
		errs = append(errs, fmt.Errorf("-expect-status %d: not an HTTP status", o.ExpectStatus))
	}
	if o.Concurrency == 0 {
		o.Concurrency = defaultConcurrency
		if o.Rate > 0 {
			o.Concurrency = defaultRateConcurrency
		}
	}
	return errors.Join(errs...)
}
