package auditscanner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Scanner runs audits. Its fields are set by New; Run may be called more
// than once, each call being a run of its own, but not concurrently.
type Scanner struct {
	opts     Options
	kube     client.Client
	dyn      dynamic.Interface
	resolver policyResolver
	reviewer *reviewer
	kind     reportKind
	stdout   io.Writer
	logger   *slog.Logger
	now      func() time.Time

	outMu sync.Mutex // serializes the writes to stdout
}

// Config is what New needs besides the options.
type Config struct {
	// Kube reads policies, namespaces, Services and writes reports; its
	// scheme must know the policy kinds, the built-in kinds and both report
	// kinds (see NewScheme).
	Kube client.Client
	// Dynamic lists the audited resources.
	Dynamic dynamic.Interface
	// Stdout receives the reports with --output-scan.
	Stdout io.Writer
	// Logger receives the logs.
	Logger *slog.Logger
}

// New returns a scanner for opts, which must be valid (Options.Validate).
func New(opts Options, cfg Config) (*Scanner, error) {
	openReports, err := opts.useOpenReports()
	if err != nil {
		return nil, err
	}
	// One connection per resource audited at once: its policies, evaluated
	// at once too, wait for one another's connections rather than open
	// --parallel-policies times more, which the policy servers' workers
	// could not serve any faster.
	rv, err := newReviewer(&opts, opts.ParallelNamespaces*opts.ParallelResources)
	if err != nil {
		return nil, err
	}
	return &Scanner{
		opts:     opts,
		kube:     cfg.Kube,
		dyn:      cfg.Dynamic,
		resolver: newClusterResolver(cfg.Kube, cfg.Kube.RESTMapper(), opts.KubewardenNamespace, opts.PolicyServerURL),
		reviewer: rv,
		kind:     reportKind{openReports: openReports},
		stdout:   cfg.Stdout,
		logger:   cfg.Logger,
		now:      time.Now,
	}, nil
}

// ErrIncomplete is wrapped by the error of a run in which some scope could
// not be scanned completely: its reports of the previous run were kept.
var ErrIncomplete = errors.New("the audit is incomplete")

// Run runs one audit (docs/compatibility.md#audit-scanner): the cluster-wide
// resources, then every namespace but the ignored ones and the Kubewarden
// namespace (or only one of the two, with --cluster or --namespace). It returns
// an error wrapping ErrIncomplete when a scope could not be scanned completely,
// and any other error when the run could not start.
func (s *Scanner) Run(ctx context.Context) error {
	defer s.reviewer.close()
	start := s.now()
	runUID := uuid.NewString()
	logger := s.logger.With(keyRunUID, runUID)
	logger.InfoContext(ctx, "audit started", keyReportKind, s.kind.String())
	st := &store{c: s.kube, kind: s.kind, runUID: runUID, pageSize: int64(s.opts.PageSize), keepUnchanged: s.opts.KeepUnchangedReports}
	if s.kind.openReports && !s.opts.DisableStore {
		if err := deleteLegacyReports(ctx, s.kube, int64(s.opts.PageSize), logger); err != nil {
			logger.WarnContext(ctx, "legacy PolicyReports not deleted", keyError, err)
		}
	}
	cat, err := loadCatalog(ctx, s.kube)
	if err != nil {
		return err
	}
	r := &run{Scanner: s, logger: logger, runUID: runUID, store: st, catalog: cat, metrics: newRunMetrics(), namespaceCache: newNamespaceCache(s.kube)}
	if !s.opts.DisableKubernetesPolicies {
		src := kubeSource{reader: s.kube, dyn: s.dyn, mapper: s.kube.RESTMapper(), namespace: r.namespaceCache.get}
		if r.kubePolicies, err = loadKubeCatalog(ctx, src, logger); err != nil {
			return err
		}
		defer r.kubePolicies.close()
	}
	var errs []error
	if s.opts.Namespace == "" {
		res := r.scanScope(ctx, nil)
		r.metrics.addScope(res)
		logger.InfoContext(ctx, "cluster-wide resources scanned", res.logArgs()...)
		if res.err != nil {
			errs = append(errs, fmt.Errorf("cluster-wide resources: %w", res.err))
		}
	}
	if !s.opts.Cluster {
		errs = append(errs, r.scanNamespaces(ctx)...)
	}
	scanErr := errors.Join(errs...)
	exportErr := r.metrics.export(ctx, &s.opts, start, s.now().Sub(start), scanErr == nil)
	if scanErr != nil {
		return errors.Join(fmt.Errorf("%w (the previous reports of its incomplete scopes were kept): %w", ErrIncomplete, scanErr), exportErr)
	}
	if exportErr != nil {
		return exportErr
	}
	logger.InfoContext(ctx, "audit finished")
	return nil
}

// run is the state of one Run.
type run struct {
	*Scanner
	logger  *slog.Logger
	runUID  string
	store   *store
	catalog *catalog
	// kubePolicies are the VAP and MAP bindings; nil with
	// --disable-kubernetes-policies.
	kubePolicies *kubeCatalog
	// namespaceCache answers kube's reads of namespaces.
	namespaceCache *namespaceCache
	metrics        *runMetrics
	// noted are the notes about policies already logged in this run.
	noted sync.Map
}

// note logs why a policy was skipped or errored, once per run.
func (r *run) note(ctx context.Context, level slog.Level, msg, policy string, err error) {
	if _, seen := r.noted.LoadOrStore(msg+"\x00"+policy, true); seen {
		return
	}
	args := []any{keyPolicy, policy}
	if err != nil {
		args = append(args, keyError, err)
	}
	r.logger.Log(ctx, level, msg, args...)
}

// scanNamespaces scans --namespace, or every namespace but the ignored
// ones, --parallel-namespaces at a time, and returns the errors of the
// incomplete ones.
func (r *run) scanNamespaces(ctx context.Context) []error {
	namespaces, err := r.namespaces(ctx)
	if err != nil {
		return []error{err}
	}
	var (
		mu   sync.Mutex
		errs []error
		done atomic.Int64
		wg   sync.WaitGroup
	)
	work := make(chan *corev1.Namespace)
	for range min(r.opts.ParallelNamespaces, len(namespaces)) {
		wg.Go(func() {
			for ns := range work {
				res := r.scanScope(ctx, ns)
				r.metrics.addScope(res)
				r.logger.InfoContext(ctx, "namespace scanned", append([]any{keyNamespace, ns.Name,
					keyDone, done.Add(1), keyTotal, len(namespaces)}, res.logArgs()...)...)
				if res.err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("namespace %q: %w", ns.Name, res.err))
					mu.Unlock()
				}
			}
		})
	}
	for _, ns := range namespaces {
		select {
		case work <- ns:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil && len(errs) == 0 {
		errs = append(errs, ctx.Err())
	}
	return errs
}

// namespaces returns --namespace, or every namespace but the ignored ones
// and the Kubewarden namespace, read from the API server's watch cache.
func (r *run) namespaces(ctx context.Context) ([]*corev1.Namespace, error) {
	if r.opts.Namespace != "" {
		var ns corev1.Namespace
		if err := r.kube.Get(ctx, client.ObjectKey{Name: r.opts.Namespace}, &ns); err != nil {
			return nil, fmt.Errorf("getting namespace %q: %w", r.opts.Namespace, err)
		}
		return []*corev1.Namespace{&ns}, nil
	}
	var list corev1.NamespaceList
	if err := r.kube.List(ctx, &list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	ignored := append(slices.Clone(r.opts.IgnoreNamespaces), r.opts.KubewardenNamespace)
	var out []*corev1.Namespace
	for i := range list.Items {
		ns := &list.Items[i]
		if slices.Contains(ignored, ns.Name) || ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b *corev1.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scopeStats counts what happened in a scope; safe for concurrent use.
type scopeStats struct {
	resources, created, updated, unchanged, evalErrors atomic.Int64
	// reused counts the resources whose report was kept without
	// evaluating them (see AnnotationInputs); they are counted as
	// unchanged too.
	reused atomic.Int64
	// failures are the errors that make the scope incomplete.
	mu       sync.Mutex
	failures []error
	// unavailable counts the requests no policy server answered; the first
	// error is kept.
	unavailable      atomic.Int64
	firstUnavailable atomic.Pointer[string]
}

func (st *scopeStats) fail(err error) {
	st.mu.Lock()
	st.failures = append(st.failures, err)
	st.mu.Unlock()
}

// err is the reason the scope is incomplete, nil when it is complete.
func (st *scopeStats) err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	errs := slices.Clone(st.failures)
	if n := st.unavailable.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d audit requests got no answer from the policy server, the first: %s", n, *st.firstUnavailable.Load()))
	}
	return errors.Join(errs...)
}

// item is a resource to audit with the policies of its GVR.
type item struct {
	obj      *unstructured.Unstructured
	gvr      schema.GroupVersionResource
	policies []*auditPolicy
}

// scanScope audits the resources of namespace ns, or the cluster-wide ones
// when ns is nil, and writes their reports; when the scan was complete, it
// deletes the scope's reports of previous runs that this run did not write.
// Its result says why the scan was incomplete, if it was.
func (r *run) scanScope(ctx context.Context, ns *corev1.Namespace) *scopeResult {
	start := time.Now()
	namespace := ""
	var sel *policySelection
	logger := r.logger
	if ns == nil {
		sel = selectScope(ctx, r.note, r.catalog.cluster, nil, false, r.resolver, r.kubePolicies, nil)
	} else {
		r.namespaceCache.add(ns)
		namespace = ns.Name
		logger = logger.With(keyNamespace, namespace)
		pols, invalid := r.catalog.policiesForNamespace(ns)
		for _, name := range invalid {
			r.note(ctx, slog.LevelError, "policy errored: invalid namespaceSelector", name, nil)
		}
		sel = selectScope(ctx, r.note, pols, invalid, true, r.resolver, r.kubePolicies, ns)
	}

	res := &scopeResult{sel: sel}
	stats := &res.stats
	var existing map[string]existingReport
	existingKnown := false
	if !r.opts.DisableStore {
		var err error
		existing, err = r.store.existing(ctx, namespace)
		if err != nil {
			logger.WarnContext(ctx, "previous reports not read: every report is written whole", keyError, err)
		} else {
			existingKnown = true
		}
	}
	var touchedMu sync.Mutex
	touched := map[string]bool{}

	work := make(chan item)
	var wg sync.WaitGroup
	for range r.opts.ParallelResources {
		wg.Go(func() {
			for it := range work {
				name := r.auditResource(ctx, logger, sel, it, existing, stats)
				if name != "" {
					touchedMu.Lock()
					touched[name] = true
					touchedMu.Unlock()
				}
			}
		})
	}
	for _, gvr := range sel.gvrs {
		pols := sel.byGVR[gvr]
		err := r.eachResource(ctx, gvr, namespace, func(obj *unstructured.Unstructured) bool {
			select {
			case work <- item{obj: obj, gvr: gvr, policies: pols}:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err != nil {
			stats.fail(err)
			logger.ErrorContext(ctx, "resources not listed", keyResource, gvr.String(), keyError, err)
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		stats.fail(err)
	}

	res.err = stats.err()
	if res.err == nil && !r.opts.DisableStore {
		var stale []string
		for name := range existing {
			if !touched[name] {
				stale = append(stale, name)
			}
		}
		var err error
		switch {
		case existingKnown && r.opts.KeepUnchangedReports:
			// The unchanged reports still carry the run-uid of the run
			// that wrote them: the stale ones go by name.
			if len(stale) > 0 {
				err = r.store.deleteStale(ctx, namespace, stale, existing)
				res.cleaned = true
			}
		case !existingKnown || len(stale) > 0:
			// Without the listing, every report of the run was written
			// whole, with this run's run-uid.
			err = r.store.cleanup(ctx, namespace)
			res.cleaned = true
		}
		if err != nil {
			res.err, res.cleaned = err, false
		}
	}
	res.duration = time.Since(start)
	return res
}

// scopeResult is what scanning a scope did.
type scopeResult struct {
	sel      *policySelection
	stats    scopeStats
	cleaned  bool
	duration time.Duration
	// err says why the scan was incomplete; nil when it was complete.
	err error
}

// logArgs are the key/value pairs of the scope's progress log line.
func (res *scopeResult) logArgs() []any {
	st := &res.stats
	args := []any{keyPolicies, res.sel.audited, keySkipped, res.sel.skipped, keyErrored, res.sel.errored,
		keyResources, st.resources.Load(), keyCreated, st.created.Load(), keyUpdated, st.updated.Load(),
		keyUnchanged, st.unchanged.Load(), keyReused, st.reused.Load(), keyCleaned, res.cleaned, keyEvalErrors, st.evalErrors.Load(),
		keyIncomplete, res.err != nil, keyDurationMillis, res.duration.Milliseconds()}
	if res.err != nil {
		args = append(args, keyError, res.err)
	}
	return args
}

// auditResource evaluates it.obj with the policies whose objectSelector
// selects it, --parallel-policies at a time, prints its report with
// --output-scan and stores it. When the scope's listing found a report of
// it computed from the same inputs (AnnotationInputs), it keeps that
// report, patching its run-uid label only (or nothing, with
// --keep-unchanged-reports), and evaluates nothing. It
// returns the report's name once it is stored (or would be, with
// --disable-store), "" when it was not.
func (r *run) auditResource(ctx context.Context, logger *slog.Logger, sel *policySelection, it item, existing map[string]existingReport, stats *scopeStats) string {
	stats.resources.Add(1)
	obj := it.obj
	var matching []*auditPolicy
	for _, p := range it.policies {
		if p.matches(obj.GetLabels()) {
			matching = append(matching, p)
		}
	}
	reuse := !r.opts.DisableStore && !r.opts.DisableResultReuse && reusable(matching)
	prev, found := existing[string(obj.GetUID())]
	inputs := ""
	if reuse && found && prev.inputs != "" {
		inputs = inputsDigest(obj, matching, sel.skipped, sel.errored, prev.digest)
	}
	if act := decideReport(reportFacts{found: found, stored: prev, inputs: inputs, keepUnchanged: r.opts.KeepUnchangedReports}); act != actionEvaluate {
		name, done := r.reuseReport(ctx, logger, obj, prev, act, stats)
		if done {
			return name
		}
	}
	evals, err := r.evaluate(ctx, it, matching)
	if err != nil {
		stats.fail(err)
		return ""
	}
	for _, e := range evals {
		if !e.errored {
			continue
		}
		stats.evalErrors.Add(1)
		if e.unavailable {
			if stats.unavailable.Add(1) == 1 {
				msg := e.message
				stats.firstUnavailable.Store(&msg)
			}
		}
		logger.ErrorContext(ctx, "policy evaluation failed", keyPolicy, e.policy.name, keyName, obj.GetName(),
			keyResource, obj.GroupVersionKind().String(), keyURL, e.policy.url, keyError, e.message)
	}
	rep := newReport(obj, r.runUID, sel.skipped, sel.errored, evals, r.now().Unix())
	r.metrics.addResults(rep.results)
	repObj := r.kind.object(rep)
	var d digest
	if !r.opts.DisableStore {
		var err error
		if d, err = digestOf(repObj); err != nil {
			stats.fail(err)
			return ""
		}
		if reuse && rep.summary.errors == sel.errored {
			repObj.SetAnnotations(map[string]string{AnnotationInputs: inputsDigest(obj, matching, sel.skipped, sel.errored, d)})
		}
	}
	if r.opts.OutputScan {
		if err := r.output(repObj); err != nil {
			stats.fail(err)
		}
	}
	if r.opts.DisableStore {
		return rep.name
	}
	out, err := r.store.write(ctx, repObj, d, prev, found)
	if err != nil {
		stats.fail(err)
		logger.ErrorContext(ctx, "report not stored", keyName, rep.name, keyError, err)
		return ""
	}
	switch out {
	case outcomeCreated:
		stats.created.Add(1)
	case outcomeUpdated:
		stats.updated.Add(1)
	case outcomeUnchanged:
		stats.unchanged.Add(1)
	}
	return rep.name
}

// evaluate evaluates it.obj with matching, --parallel-policies at a time,
// and returns the verdicts to report: a ValidatingAdmissionPolicy's
// validation or MutatingAdmissionPolicy binding that does not apply to the
// object has none.
func (r *run) evaluate(ctx context.Context, it item, matching []*auditPolicy) ([]evaluation, error) {
	if len(matching) == 0 {
		return nil, nil
	}
	var body []byte
	var req *admissionv1.AdmissionRequest
	for _, p := range matching {
		var err error
		switch {
		case p.local != nil && req == nil:
			req, err = auditRequest(it.obj, it.gvr.Resource)
		case p.local == nil && body == nil:
			body, err = reviewBody(it.obj)
		}
		if err != nil {
			return nil, err
		}
	}
	evals := make([]evaluation, len(matching))
	reported := make([]bool, len(matching))
	sem := make(chan struct{}, r.opts.ParallelPolicies)
	var wg sync.WaitGroup
	for i, p := range matching {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if p.local != nil {
				evals[i].verdict, reported[i] = p.local.evaluate(ctx, req)
			} else {
				evals[i].verdict, reported[i] = r.reviewer.audit(ctx, p.url, body), true
			}
			evals[i].policy = p
		})
	}
	wg.Wait()
	out := evals[:0]
	for i, e := range evals {
		if reported[i] {
			out = append(out, e)
		}
	}
	return out, nil
}

// reuseReport keeps prev, the report of obj found by the scope's listing,
// as act (decideReport) says: left alone, or its run-uid label patched
// (store.reuse); it counts its results and prints it with --output-scan.
// It returns the report's name, and done false when the report changed or
// went since the listing: obj must then be evaluated.
func (r *run) reuseReport(ctx context.Context, logger *slog.Logger, obj *unstructured.Unstructured, prev existingReport, act reportAction, stats *scopeStats) (name string, done bool) {
	target := r.kind.empty(obj.GetNamespace() == "")
	target.SetName(string(obj.GetUID()))
	target.SetNamespace(obj.GetNamespace())
	stored, reused, err := r.store.reuse(ctx, target, prev, act, r.opts.OutputScan)
	if err != nil {
		stats.fail(err)
		logger.ErrorContext(ctx, "report not stored", keyName, target.GetName(), keyError, err)
		return "", true
	}
	if !reused {
		return "", false
	}
	stats.unchanged.Add(1)
	stats.reused.Add(1)
	r.metrics.addStoredResults(prev.results)
	if r.opts.OutputScan {
		stored.GetObjectKind().SetGroupVersionKind(r.kind.gvk(obj.GetNamespace() == ""))
		stored.SetManagedFields(nil)
		if err := r.output(stored); err != nil {
			stats.fail(err)
		}
	}
	return target.GetName(), true
}

// output prints a report on stdout, on a line of its own.
func (r *run) output(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding a report for --output-scan: %w", err)
	}
	r.outMu.Lock()
	defer r.outMu.Unlock()
	if _, err := r.stdout.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing a report on stdout: %w", err)
	}
	return nil
}

// eachResource lists the gvr resources of namespace (all of them, for a
// cluster-wide resource, when namespace is empty) in pages of --page-size
// and calls fn with each, until fn returns false. When a continuation
// expired (the list took longer than the API server keeps its
// continuations), it lists again from the start, once: the objects already
// seen are audited again, which rewrites the same reports.
func (r *run) eachResource(ctx context.Context, gvr schema.GroupVersionResource, namespace string, fn func(*unstructured.Unstructured) bool) error {
	res := r.dyn.Resource(gvr).Namespace(namespace)
	opts := metav1.ListOptions{Limit: int64(r.opts.PageSize)}
	restarted := false
	for {
		list, err := res.List(ctx, opts)
		if apierrors.IsResourceExpired(err) && opts.Continue != "" && !restarted {
			r.logger.WarnContext(ctx, "list continuation expired: listing again", keyResource, gvr.String(), keyNamespace, namespace)
			opts.Continue, restarted = "", true
			continue
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvr, err)
		}
		for i := range list.Items {
			if !fn(&list.Items[i]) {
				return ctx.Err()
			}
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}
