package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Bounds of the waits around the measurements.
const (
	namespaceWait   = 5 * time.Minute
	deleteWait      = 10 * time.Minute
	deleteCallLimit = 2 * time.Minute
	waitPoll        = 200 * time.Millisecond
)

// podSelector selects the pods the tool created.
const podSelector = labelManagedBy + "=" + managedBy

// bench runs the measurements of one invocation. Its methods are called
// from one goroutine; the workers of a level share only what level hands
// them.
type bench struct {
	opts *Options
	kube kubernetes.Interface
	// apiServerMetrics and policyServerMetrics fetch /metrics; nil skips.
	apiServerMetrics    metricsGetter
	policyServerMetrics metricsGetter
	// proc is the mount point of procfs: /proc, or a fixture in tests.
	proc string
	log  io.Writer
}

// measure runs every level of -c and returns what it found. It deletes the
// pods after each level and the namespace at the end (unless
// -keep-namespace), also when a level fails.
func (b *bench) measure(ctx context.Context) (res *Result, err error) {
	res = &Result{
		Label: b.opts.Label, Namespace: b.opts.Namespace, Started: time.Now(),
		LoadAverage: loadAverage(b.proc), CPUs: runtime.NumCPU(),
		Warmup: b.opts.Warmup, Duration: b.opts.Duration,
	}
	if err := b.ensureNamespace(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if !b.opts.KeepNamespace {
			err = errors.Join(err, b.deleteNamespace(context.WithoutCancel(ctx)))
		}
	}()
	for _, c := range b.opts.Levels {
		l, err := b.level(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", c, err)
		}
		res.Levels = append(res.Levels, *l)
		fmt.Fprintf(b.log, "admissionbench: %d clients: %d creates, p99 %s ms\n", c, l.Creates, ms(l.P99))
	}
	return res, nil
}

// worker is what one client of a level records.
type worker struct {
	latencies []time.Duration
	errors    map[string]int
	warm      int
	last      time.Time // when its last measured answer came
}

// level runs c clients creating pods back to back: -warmup, then the
// measured window of -d (or -n creations), then deletes the pods.
func (b *bench) level(ctx context.Context, c int) (*LevelResult, error) {
	l := &LevelResult{Concurrency: c, EvaluationsPerCreate: -1}
	before := b.scrapeAll(ctx)

	pods := b.kube.CoreV1().Pods(b.opts.Namespace)
	start := time.Now()
	measureStart := start.Add(b.opts.Warmup)
	end := measureStart.Add(b.opts.Duration)
	var seq, slots atomic.Int64
	workers := make([]*worker, c)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{errors: map[string]int{}}
		workers[i] = w
		wg.Go(func() {
			pod := benchPod(b.opts.Namespace, "")
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(end) {
					return
				}
				measured := !now.Before(measureStart)
				if measured && b.opts.MaxCreates > 0 && slots.Add(1) > int64(b.opts.MaxCreates) {
					return
				}
				pod.Name = fmt.Sprintf("c%d-%07d", c, seq.Add(1))
				rctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
				t0 := time.Now()
				_, err := pods.Create(rctx, pod, metav1.CreateOptions{})
				d := time.Since(t0)
				cancel()
				switch {
				case err != nil && ctx.Err() != nil:
					return // interrupted: not an answer
				case !measured:
					if err == nil {
						w.warm++
					}
				case err != nil:
					w.errors[errorKey(err)]++
				default:
					w.latencies = append(w.latencies, d)
					w.last = t0.Add(d)
				}
			}
		})
	}

	// The CPU times bracket the measured window: from the end of the
	// warm-up to the moment the last client stopped.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	s0 := b.snapshot()
	select {
	case <-time.After(time.Until(measureStart)):
		s0 = b.snapshot()
	case <-done:
	}
	<-done
	s1 := b.snapshot()
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, b.deletePods(context.WithoutCancel(ctx)))
	}

	var latencies []time.Duration
	var last time.Time
	for _, w := range workers {
		latencies = append(latencies, w.latencies...)
		l.WarmupCreates += w.warm
		for k, n := range w.errors {
			if l.ErrorSamples == nil {
				l.ErrorSamples = map[string]int{}
			}
			l.ErrorSamples[k] += n
			l.Errors += n
		}
		if w.last.After(last) {
			last = w.last
		}
	}
	if last.After(measureStart) {
		l.Elapsed = last.Sub(measureStart)
	}
	l.summarize(latencies)
	l.fillCPU(s0, s1)

	after := b.scrapeAll(ctx)
	b.fillMetrics(l, before, after)
	remaining, err := b.countPods(ctx)
	if err == nil && remaining >= 0 {
		l.Vanished = max(0, l.Creates+l.WarmupCreates-remaining)
	}
	if err := b.deletePods(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// errorKey is how an error is counted: its API reason (or Go type) and the
// first 200 bytes of its message.
func errorKey(err error) string {
	reason := string(apierrors.ReasonForError(err))
	if reason == "" {
		reason = fmt.Sprintf("%T", err)
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return reason + ": " + msg
}

// snapshot is what /proc says at one end of a measured window.
type snapshot struct {
	cpu      map[string]time.Duration // the processes of -cpu-of, and this one
	machine  machineCPU
	tcpOpens int64 // -1 when unknown
}

// snapshot reads the CPU times of the processes of -cpu-of, of this
// process and of the machine, and the TCP connections opened so far.
func (b *bench) snapshot() snapshot {
	return snapshot{
		cpu:      processCPU(b.proc, b.opts.processNames()),
		machine:  readMachineCPU(b.proc),
		tcpOpens: readTCPActiveOpens(b.proc),
	}
}

// restOfMachine names, in LevelResult.CPU, the busy CPU time no process of
// -cpu-of (nor admissionbench) accounts for: other processes and the
// kernel's own work, such as network interrupts.
const restOfMachine = "rest of the machine"

// fillCPU sets what the two snapshots say about the measured window.
func (l *LevelResult) fillCPU(s0, s1 snapshot) {
	l.MachineBusy = busyShare(s0.machine, s1.machine)
	l.CPU = map[string]time.Duration{}
	var named time.Duration
	for name, d := range s1.cpu {
		l.CPU[name] = d - s0.cpu[name]
		named += l.CPU[name]
	}
	if s1.machine.total > s0.machine.total {
		busy := time.Duration(s1.machine.busy-s0.machine.busy) * clockTick
		l.CPU[restOfMachine] = max(0, busy-named)
	}
	l.TCPOpensPerCreate = -1
	if s0.tcpOpens >= 0 && s1.tcpOpens >= s0.tcpOpens && l.Creates > 0 {
		l.TCPOpensPerCreate = float64(s1.tcpOpens-s0.tcpOpens) / float64(l.Creates)
	}
}

// scrapes is what the metrics said at one moment; a field is nil when
// its metrics could not be read.
type scrapes struct {
	apiServer   *apiServerSample
	evaluations *float64
}

// scrapeAll reads the metrics the tool was given. A failed scrape leaves
// its figure out and says so on the log: the measurement stands without it.
func (b *bench) scrapeAll(ctx context.Context) scrapes {
	var s scrapes
	if b.apiServerMetrics != nil {
		if f, err := scrape(ctx, b.apiServerMetrics); err != nil {
			fmt.Fprintf(b.log, "admissionbench: reading the API server's metrics: %v\n", err)
		} else {
			a := apiServerTotals(f)
			s.apiServer = &a
		}
	}
	if b.policyServerMetrics != nil {
		f, err := scrape(ctx, b.policyServerMetrics)
		if err == nil {
			var n float64
			if n, err = evaluationsTotal(f); err == nil {
				s.evaluations = &n
			}
		}
		if err != nil {
			fmt.Fprintf(b.log, "admissionbench: reading the policy server's metrics: %v\n", err)
		}
	}
	return s
}

// fillMetrics sets what the metrics say about the level, from the scrapes
// before and after it.
func (b *bench) fillMetrics(l *LevelResult, before, after scrapes) {
	if a, z := before.apiServer, after.apiServer; a != nil && z != nil {
		if n := z.stepCount - a.stepCount; z.stepCount > a.stepCount {
			l.ValidatingAdmission = seconds((z.stepSum - a.stepSum) / float64(n))
		}
		if n := z.webhookCount - a.webhookCount; z.webhookCount > a.webhookCount {
			l.Webhook = seconds((z.webhookSum - a.webhookSum) / float64(n))
			l.WebhookCalls = float64(n)
		}
	}
	if before.evaluations != nil && after.evaluations != nil {
		if creates := l.Creates + l.WarmupCreates; creates > 0 {
			l.EvaluationsPerCreate = (*after.evaluations - *before.evaluations) / float64(creates)
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ensureNamespace creates the namespace, or takes over one an earlier run
// left, and waits until pods can be created in it (its default
// ServiceAccount exists).
func (b *bench) ensureNamespace(ctx context.Context) error {
	name := b.opts.Namespace
	namespaces := b.kube.CoreV1().Namespaces()
	deadline := time.Now().Add(namespaceWait)
	for {
		ns, err := namespaces.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{labelManagedBy: managedBy},
			}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s: %w", name, err)
			}
			continue
		case err != nil:
			return fmt.Errorf("reading namespace %s: %w", name, err)
		case ns.Labels[labelManagedBy] != managedBy:
			return fmt.Errorf("namespace %s exists without the label %s, so admissionbench did not create it: choose another -namespace", name, podSelector)
		case ns.DeletionTimestamp == nil:
			return b.waitFor(ctx, deadline, "the default ServiceAccount of namespace "+name, func() (bool, error) {
				_, err := b.kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return err == nil, err
			})
		}
		// Being deleted: wait until it is gone, then create it again.
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s is still being deleted after %v", name, namespaceWait)
		}
		if err := sleep(ctx, waitPoll); err != nil {
			return err
		}
	}
}

// deleteNamespace deletes the namespace and waits until it is gone.
func (b *bench) deleteNamespace(ctx context.Context) error {
	name := b.opts.Namespace
	namespaces := b.kube.CoreV1().Namespaces()
	if err := namespaces.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return b.waitFor(ctx, time.Now().Add(namespaceWait), "namespace "+name+" to be deleted", func() (bool, error) {
		_, err := namespaces.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// deletePods deletes the tool's pods in the namespace, without grace (no
// kubelet would confirm it), and waits until they are gone.
func (b *bench) deletePods(ctx context.Context) error {
	pods := b.kube.CoreV1().Pods(b.opts.Namespace)
	deadline := time.Now().Add(deleteWait)
	return b.waitFor(ctx, deadline, "the pods to be deleted", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, deleteCallLimit)
		err := pods.DeleteCollection(cctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			metav1.ListOptions{LabelSelector: podSelector})
		cancel()
		if err != nil && !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
			return false, fmt.Errorf("deleting the pods: %w", err)
		}
		n, err := b.countPods(ctx)
		return n == 0, err
	})
}

// countPods returns how many of the tool's pods the namespace holds, or -1
// when the API server does not say (a list with a limit of 1 counts the
// rest in remainingItemCount).
func (b *bench) countPods(ctx context.Context) (int, error) {
	list, err := b.kube.CoreV1().Pods(b.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector, Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("listing the pods: %w", err)
	}
	switch {
	case len(list.Items) == 0:
		return 0, nil
	case list.RemainingItemCount != nil:
		return len(list.Items) + int(*list.RemainingItemCount), nil
	case list.Continue == "":
		return len(list.Items), nil
	}
	return -1, nil
}

// waitFor polls cond until it holds, fails or deadline passes.
func (b *bench) waitFor(ctx context.Context, deadline time.Time, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("waiting for %s: %w", what, last)
			}
			return fmt.Errorf("waiting for %s: timed out", what)
		}
		if err := sleep(ctx, waitPoll); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// rejection is what firstRejection found.
type rejection struct {
	// SinceStart is from -since (or the start) to the denial's answer;
	// Polling from the first dry-run creation.
	SinceStart, Polling time.Duration
	// Admitted and Failed count the dry-run creations before: admitted,
	// or failed otherwise than by a denial (LastError is the last one).
	Admitted, Failed int
	LastError        error
	Message          string
}

// firstRejection creates violatingPod in dry-run every -poll until a
// webhook denies it with -expect-message.
func (b *bench) firstRejection(ctx context.Context) (*rejection, error) {
	since := b.opts.SinceTime
	if since.IsZero() {
		since = time.Now()
	}
	if err := b.ensureNamespace(ctx); err != nil {
		return nil, err
	}
	pods := b.kube.CoreV1().Pods(b.opts.Namespace)
	pod := violatingPod(b.opts.Namespace, "admissionbench-first-rejection")
	r := &rejection{}
	start := time.Now()
	deadline := start.Add(b.opts.Wait)
	for {
		rctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		_, err := pods.Create(rctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		cancel()
		now := time.Now()
		switch {
		case err == nil:
			r.Admitted++
		case isDenial(err, b.opts.ExpectMessage):
			r.SinceStart, r.Polling, r.Message = now.Sub(since), now.Sub(start), err.Error()
			return r, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			r.Failed++
			r.LastError = err
		}
		if now.After(deadline) {
			return nil, fmt.Errorf("no denial after %v (%d dry-run creations admitted, %d failed; last error: %v)",
				b.opts.Wait, r.Admitted, r.Failed, r.LastError)
		}
		if err := sleep(ctx, b.opts.Poll); err != nil {
			return nil, err
		}
	}
}

// isDenial reports whether err is an admission webhook's denial holding
// want.
func isDenial(err error, want string) bool {
	msg := err.Error()
	return strings.Contains(msg, "denied the request") && strings.Contains(msg, want)
}

// WriteText prints the rejection.
func (r *rejection) WriteText(w io.Writer, sinceGiven bool) {
	from := "the start"
	if sinceGiven {
		from = "-since"
	}
	fmt.Fprintf(w, "first rejection %.2f s after %s (%.2f s after the first dry-run creation; %d admitted and %d failed before it)\n",
		r.SinceStart.Seconds(), from, r.Polling.Seconds(), r.Admitted, r.Failed)
	if r.LastError != nil {
		fmt.Fprintf(w, "last failure before it: %v\n", r.LastError)
	}
	fmt.Fprintf(w, "denial: %s\n", r.Message)
}
