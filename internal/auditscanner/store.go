package auditscanner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"
)

// store reads and writes the reports of a run. It is safe for concurrent
// use.
type store struct {
	c        client.Client
	kind     reportKind
	runUID   string
	pageSize int64
	// keepUnchanged leaves unchanged reports as they are
	// (Options.KeepUnchangedReports).
	keepUnchanged bool
}

// existingReport is what the store keeps of a report found at the start of
// a scope's scan.
type existingReport struct {
	digest          digest
	resourceVersion string
	// inputs is its AnnotationInputs, "" when it has none.
	inputs string
	// results are the policy and result of each of its results, when it
	// has inputs (only then may it be reused and its results counted
	// without reading it again).
	results [][2]string
}

// existing returns the digests of the scanner's reports in namespace (the
// cluster-wide ones when namespace is empty), by name. It lists them in
// pages and keeps only their digests.
func (st *store) existing(ctx context.Context, namespace string) (map[string]existingReport, error) {
	out := map[string]existingReport{}
	opts := []client.ListOption{client.MatchingLabels{LabelManagedBy: LabelManagedByValue}, client.Limit(st.pageSize)}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	// The policy names and results of the reports, the same few
	// strings many times, are kept once.
	interned := map[string]string{}
	intern := func(s string) string {
		if v, ok := interned[s]; ok {
			return v
		}
		interned[s] = s
		return s
	}
	cont := ""
	for {
		l := st.kind.list(namespace == "")
		if err := st.c.List(ctx, l, append(opts, client.Continue(cont))...); err != nil {
			return nil, fmt.Errorf("listing the reports: %w", err)
		}
		for _, o := range st.kind.items(l) {
			d, err := digestOf(o)
			if err != nil {
				return nil, err
			}
			e := existingReport{digest: d, resourceVersion: o.GetResourceVersion(), inputs: o.GetAnnotations()[AnnotationInputs]}
			if e.inputs != "" {
				e.results = storedResults(o)
				for i, r := range e.results {
					e.results[i] = [2]string{intern(r[0]), intern(r[1])}
				}
			}
			out[o.GetName()] = e
		}
		if cont = l.GetContinue(); cont == "" {
			return out, nil
		}
	}
}

// skipFieldValidation spares the API server the search for unknown and
// duplicate fields in each report written: the reports are encoded from
// the Go types the CRDs are made from, so there are none.
const skipFieldValidation = client.FieldValidation(metav1.FieldValidationIgnore)

// outcome is what writing a report did.
type outcome int

const (
	outcomeCreated outcome = iota
	outcomeUpdated
	// outcomeUnchanged: only the run-uid label was patched, or nothing
	// was written (keepUnchanged).
	outcomeUnchanged
)

// target returns an empty report of the kind named as obj, for patches.
func (st *store) target(obj client.Object) client.Object {
	t := st.kind.empty(obj.GetNamespace() == "")
	t.SetName(obj.GetName())
	t.SetNamespace(obj.GetNamespace())
	return t
}

// patchRunUID patches the run-uid label of the report named as obj, and its
// AnnotationInputs to inputs ("" removes it) when prev's differs, guarded by
// the resourceVersion prev was listed at. It returns the report as patched,
// whole when whole is set, else its metadata only (the API server then
// answers with the metadata only); a conflict or a missing report is
// returned as the API server's error.
func (st *store) patchRunUID(ctx context.Context, obj client.Object, prev existingReport, inputs string, whole bool) (client.Object, error) {
	md := map[string]any{
		"labels":          map[string]string{LabelRunUID: st.runUID},
		"resourceVersion": prev.resourceVersion,
	}
	if inputs != prev.inputs {
		md["annotations"] = map[string]any{AnnotationInputs: annotationValue(inputs)}
	}
	patch, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return nil, fmt.Errorf("encoding the run-uid patch of report %s: %w", obj.GetName(), err)
	}
	t := st.target(obj)
	if !whole {
		md := &metav1.PartialObjectMetadata{}
		md.SetGroupVersionKind(st.kind.gvk(obj.GetNamespace() == ""))
		md.SetName(obj.GetName())
		md.SetNamespace(obj.GetNamespace())
		t = md
	}
	if err := st.c.Patch(ctx, t, client.RawPatch(types.MergePatchType, patch), skipFieldValidation); err != nil {
		return nil, err
	}
	return t, nil
}

// annotationValue is v in a merge patch: nil (removal) when empty.
func annotationValue(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// reuse keeps the report named as obj, which the scope's listing found as
// prev, as act says (decideReport): actionLeave writes nothing (see keep),
// actionPatchRunUID patches its run-uid label and nothing else. It returns
// the report as stored (whole or its metadata only, as patchRunUID), and
// reused false when the report changed or went since the listing (its
// object must then be evaluated).
func (st *store) reuse(ctx context.Context, obj client.Object, prev existingReport, act reportAction, whole bool) (stored client.Object, reused bool, err error) {
	if act == actionLeave {
		return st.keep(ctx, obj, prev, whole)
	}
	stored, err = st.patchRunUID(ctx, obj, prev, prev.inputs, whole)
	switch {
	case err == nil:
		return stored, true, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("patching the run-uid of report %s: %w", obj.GetName(), err)
}

// keep is reuse when unchanged reports are left as they are: it writes
// nothing, and reads the report only when whole is set, to return it.
func (st *store) keep(ctx context.Context, obj client.Object, prev existingReport, whole bool) (stored client.Object, reused bool, err error) {
	if !whole {
		return obj, true, nil
	}
	t := st.target(obj)
	err = st.c.Get(ctx, client.ObjectKeyFromObject(t), t)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading report %s: %w", obj.GetName(), err)
	case t.GetResourceVersion() != prev.resourceVersion:
		return nil, false, nil
	}
	return t, true, nil
}

// write stores obj, whose digest is d, knowing what the scope's listing
// found under its name (found, prev), as decideReport says: a report found
// with the same digest and inputs is left as it is
// (--keep-unchanged-reports, the default); otherwise, or with
// --keep-unchanged-reports=false, a report found with the same digest gets
// a merge patch of its run-uid label (and of its AnnotationInputs when
// obj's differs) only, guarded by the resourceVersion it was compared at; a
// report found otherwise is replaced by a merge patch of everything the
// scanner writes; a report not found is created. Each falls back to a
// rewrite when the cluster changed since the listing.
func (st *store) write(ctx context.Context, obj client.Object, d digest, prev existingReport, found bool) (outcome, error) {
	inputs := obj.GetAnnotations()[AnnotationInputs]
	switch decideReport(reportFacts{found: found, stored: prev, evaluated: true, content: d, inputs: inputs, keepUnchanged: st.keepUnchanged}) {
	case actionLeave:
		return outcomeUnchanged, nil
	case actionPatchRunUID:
		_, err := st.patchRunUID(ctx, obj, prev, inputs, false)
		if err == nil {
			return outcomeUnchanged, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("patching the run-uid of report %s: %w", obj.GetName(), err)
		}
	case actionCreate:
		err := st.c.Create(ctx, obj, skipFieldValidation)
		if err == nil {
			return outcomeCreated, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating report %s: %w", obj.GetName(), err)
		}
	}
	return st.replace(ctx, obj)
}

// replace rewrites the report named as obj with a merge patch of
// everything the scanner writes, and creates it when it is gone.
func (st *store) replace(ctx context.Context, obj client.Object) (outcome, error) {
	full, err := fullPatch(obj)
	if err != nil {
		return 0, err
	}
	err = st.c.Patch(ctx, st.target(obj), client.RawPatch(types.MergePatchType, full), skipFieldValidation)
	if apierrors.IsNotFound(err) {
		if err = st.c.Create(ctx, obj, skipFieldValidation); err == nil {
			return outcomeCreated, nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("updating report %s: %w", obj.GetName(), err)
	}
	return outcomeUpdated, nil
}

// fullPatch returns the merge patch that makes a stored report say what
// obj says: its labels (others' labels are kept), its AnnotationInputs
// (removed when obj has none; others' annotations are kept), owner, scope,
// summary and results (removed when obj has none).
func fullPatch(obj client.Object) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding report %s: %w", obj.GetName(), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decoding report %s: %w", obj.GetName(), err)
	}
	delete(doc, "apiVersion")
	delete(doc, "kind")
	doc["metadata"] = map[string]any{"labels": obj.GetLabels(), "ownerReferences": obj.GetOwnerReferences(),
		"annotations": map[string]any{AnnotationInputs: annotationValue(obj.GetAnnotations()[AnnotationInputs])}}
	if _, ok := doc["results"]; !ok {
		doc["results"] = nil
	}
	return json.Marshal(doc)
}

// staleSelector selects the scanner's reports that this run did not write
// (docs/compatibility.md#audit-scanner).
func (st *store) staleSelector() (labels.Selector, error) {
	notRun, err := labels.NewRequirement(LabelRunUID, selection.NotEquals, []string{st.runUID})
	if err != nil {
		return nil, fmt.Errorf("selecting stale reports: %w", err)
	}
	managed, err := labels.NewRequirement(LabelManagedBy, selection.Equals, []string{LabelManagedByValue})
	if err != nil {
		return nil, fmt.Errorf("selecting stale reports: %w", err)
	}
	return labels.NewSelector().Add(*notRun, *managed), nil
}

// cleanup deletes the scanner's reports of namespace (the cluster-wide ones
// when empty) whose run-uid is not this run's, in one request.
func (st *store) cleanup(ctx context.Context, namespace string) error {
	sel, err := st.staleSelector()
	if err != nil {
		return err
	}
	opts := []client.DeleteAllOfOption{client.MatchingLabelsSelector{Selector: sel}}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := st.c.DeleteAllOf(ctx, st.kind.empty(namespace == ""), opts...); err != nil {
		return fmt.Errorf("deleting stale reports: %w", err)
	}
	return nil
}

// deleteStale deletes the reports of namespace (the cluster-wide ones when
// empty) named in names, each guarded by the resourceVersion the scope's
// listing found it at (in existing): a report written since then, by this
// run or another, is kept.
func (st *store) deleteStale(ctx context.Context, namespace string, names []string, existing map[string]existingReport) error {
	for _, name := range names {
		rv := existing[name].resourceVersion
		t := st.kind.empty(namespace == "")
		t.SetName(name)
		t.SetNamespace(namespace)
		err := st.c.Delete(ctx, t, client.Preconditions{ResourceVersion: &rv})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting stale report %s: %w", name, err)
		}
	}
	return nil
}

// deleteLegacyReports deletes every wgpolicyk8s.io PolicyReport and
// ClusterPolicyReport managed by the scanner, as a run writing OpenReports does
// first (docs/compatibility.md#audit-scanner). It reads only their metadata, to
// find the namespaces that hold some, and deletes them with one request per
// such namespace. Missing CRDs are not an error.
func deleteLegacyReports(ctx context.Context, c client.Client, pageSize int64, logger *slog.Logger) error {
	managed := client.MatchingLabels{LabelManagedBy: LabelManagedByValue}
	cluster := &metav1.PartialObjectMetadataList{}
	cluster.SetGroupVersionKind(wgpolicyv1alpha2.SchemeGroupVersion.WithKind(reportKindClusterPolicyReport + "List"))
	err := c.List(ctx, cluster, managed, client.Limit(1))
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		logger.DebugContext(ctx, "no wgpolicyk8s.io CRDs: no legacy report to delete")
		return nil
	case err != nil:
		return fmt.Errorf("listing legacy ClusterPolicyReports: %w", err)
	case len(cluster.Items) > 0:
		logger.InfoContext(ctx, "deleting legacy ClusterPolicyReports")
		if err := c.DeleteAllOf(ctx, &wgpolicyv1alpha2.ClusterPolicyReport{}, managed); err != nil {
			return fmt.Errorf("deleting legacy ClusterPolicyReports: %w", err)
		}
	}
	namespaces := map[string]bool{}
	cont := ""
	for {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(wgpolicyv1alpha2.SchemeGroupVersion.WithKind(reportKindPolicyReport + "List"))
		if err := c.List(ctx, l, managed, client.Limit(pageSize), client.Continue(cont)); err != nil {
			return fmt.Errorf("listing legacy PolicyReports: %w", err)
		}
		for _, item := range l.Items {
			namespaces[item.Namespace] = true
		}
		if cont = l.GetContinue(); cont == "" {
			break
		}
	}
	for ns := range namespaces {
		logger.InfoContext(ctx, "deleting legacy PolicyReports", keyNamespace, ns)
		if err := c.DeleteAllOf(ctx, &wgpolicyv1alpha2.PolicyReport{}, managed, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("deleting legacy PolicyReports in namespace %q: %w", ns, err)
		}
	}
	return nil
}
