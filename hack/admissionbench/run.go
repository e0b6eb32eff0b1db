package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/wardenhq/warden/hack/internal/cmdline"
)

const usage = `usage: admissionbench -kubeconfig FILE [-namespace NS] [-c 1,10,50] [-d 20s] [-n 20000] [-json FILE]
       admissionbench -mode first-rejection -kubeconfig FILE [-since UNIXTIME] [-expect-message TEXT]
       admissionbench -mode compare -base FILE -with FILE

Measures pod CREATE latency through a Kubernetes API server at fixed
concurrency levels, the time until a webhook first rejects a pod, or
compares two measurements (see the package documentation).`

// run is the whole program: args[0] is the program name. It returns the
// exit status of the package documentation.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var opts Options
	if code, ok := parseArgs(args, &opts, stderr); !ok {
		return code
	}
	if err := runMode(ctx, &opts, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "admissionbench: %v\n", err)
		return 1
	}
	return 0
}

// parseArgs parses the command line into opts (see cmdline.Parse).
func parseArgs(args []string, opts *Options, stderr io.Writer) (code int, ok bool) {
	return cmdline.Parse("admissionbench", usage, args, opts, stderr)
}

// runMode runs the mode of opts, which are valid.
func runMode(ctx context.Context, opts *Options, stdout, stderr io.Writer) error {
	if opts.Mode == modeCompare {
		base, err := readResult(opts.Base)
		if err != nil {
			return err
		}
		with, err := readResult(opts.With)
		if err != nil {
			return err
		}
		return WriteComparison(stdout, base, with)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading -kubeconfig: %w", err)
	}
	kube, err := newClient(cfg)
	if err != nil {
		return err
	}
	b := &bench{
		opts: opts, kube: kube, proc: "/proc", log: stderr,
		apiServerMetrics: func(ctx context.Context) (io.ReadCloser, error) {
			return kube.Discovery().RESTClient().Get().AbsPath("/metrics").SetHeader("Accept", "text/plain").Stream(ctx)
		},
	}
	if opts.PolicyServerMetrics != "" {
		b.policyServerMetrics = httpMetrics(opts.PolicyServerMetrics)
	}

	if opts.Mode == modeFirstRejection {
		r, err := b.firstRejection(ctx)
		if err != nil {
			return err
		}
		r.WriteText(stdout, opts.Since != "")
		if !opts.KeepNamespace {
			return b.deleteNamespace(ctx)
		}
		return nil
	}

	res, err := b.measure(ctx)
	if err != nil {
		return err
	}
	res.WriteText(stdout)
	if opts.JSON != "" {
		if err := writeResult(opts.JSON, res); err != nil {
			return err
		}
	}
	for _, l := range res.Levels {
		if l.Errors > 0 || l.Creates == 0 {
			return fmt.Errorf("%d clients: %d creations failed, %d succeeded", l.Concurrency, l.Errors, l.Creates)
		}
	}
	return nil
}

// newClient is a clientset without a client-side rate limit, speaking
// protobuf, so that the client is not what limits the creations.
func newClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // no client-side rate limiter
	cfg.Burst = 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "admissionbench"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the Kubernetes client: %w", err)
	}
	return kube, nil
}

func readResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return &r, nil
}

func writeResult(path string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing -json: %w", err)
	}
	return nil
}
