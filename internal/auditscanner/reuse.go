package auditscanner

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"
)

// AnnotationInputs is the annotation of a report whose results can be
// reused: the digest of what its results were computed from (the object at
// its resourceVersion, the policies that evaluated it at theirs, the counts
// of skipped and errored policies) and of the report's own content. A later
// run that finds the same inputs and a report whose content still has that
// digest keeps the report as it is (with --keep-unchanged-reports=false,
// patching only its run-uid label), and evaluates nothing for the object. A report that was
// edited, or whose annotation was, no longer matches and is evaluated again.
const AnnotationInputs = "warden.io/audit-inputs"

// inputsVersion changes when what a report says about the same inputs
// changes (a new version of the scanner writing other results), so that
// reports written by older scanners are evaluated again.
const inputsVersion = "warden-audit-inputs/v1"

// reportAction is what a run does with the report of one object.
type reportAction int

const (
	// actionEvaluate: the report found cannot be kept as it is without
	// evaluating the object (decided before the evaluation only).
	actionEvaluate reportAction = iota
	// actionLeave: the report found says what the run would write, and
	// nothing is written (--keep-unchanged-reports, the default).
	actionLeave
	// actionPatchRunUID: the report found says what the run would write:
	// only its run-uid label, and its AnnotationInputs when the run's
	// differs, are patched (with --keep-unchanged-reports=false, as
	// Kubewarden does, or to update AnnotationInputs).
	actionPatchRunUID
	// actionReplace: the report found says something else: it is
	// rewritten.
	actionReplace
	// actionCreate: no report was found: it is created.
	actionCreate
)

// reportFacts is what decides the report of one object.
type reportFacts struct {
	// found says that the scope's listing found a report of the object,
	// stored what it held.
	found  bool
	stored existingReport
	// evaluated says that the object was evaluated by this run: content
	// and inputs are its new report's digest and AnnotationInputs. Before
	// the evaluation, inputs is what the stored report's AnnotationInputs
	// would be if this run had written it (inputsDigest with the stored
	// report's content), "" when the object's results cannot be reused.
	evaluated bool
	content   digest
	inputs    string
	// keepUnchanged is Options.KeepUnchangedReports.
	keepUnchanged bool
}

// decideReport decides whether a report is created, rewritten, patched
// (its run-uid label only) or left alone, and, before the object is
// evaluated, whether it must be: a report found with the inputs this run
// would evaluate the object with is kept without evaluating it. It is the
// one place that decides; the store falls back to a rewrite when the
// report changed or went since the listing.
func decideReport(f reportFacts) reportAction {
	if !f.evaluated {
		if !f.found || f.stored.inputs == "" || f.inputs != f.stored.inputs {
			return actionEvaluate
		}
		// The same inputs: the evaluation would write what is stored.
		f.content = f.stored.digest
	}
	switch {
	case !f.found:
		return actionCreate
	case f.content != f.stored.digest:
		return actionReplace
	case f.keepUnchanged && f.inputs == f.stored.inputs:
		return actionLeave
	}
	return actionPatchRunUID
}

// reusable reports whether the results of obj's evaluation by matching can be
// reused by a later run that finds the same inputs: not when a policy is
// context-aware (its verdict depends on other objects than obj).
func reusable(matching []*auditPolicy) bool {
	for _, p := range matching {
		if p.contextAware {
			return false
		}
	}
	return true
}

// inputsDigest returns the value of AnnotationInputs for a report of obj
// whose content has digest content, evaluated by matching in a scope with
// skipped and errored policies.
func inputsDigest(obj *unstructured.Unstructured, matching []*auditPolicy, skipped, errored int, content digest) string {
	h := sha256.New()
	field := func(s string) {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	field(inputsVersion)
	field(obj.GetAPIVersion())
	field(obj.GetKind())
	field(string(obj.GetUID()))
	field(obj.GetResourceVersion())
	h.Write(binary.AppendUvarint(nil, uint64(skipped)))
	h.Write(binary.AppendUvarint(nil, uint64(errored)))
	pols := slices.Clone(matching)
	slices.SortFunc(pols, func(a, b *auditPolicy) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return a.rank - b.rank
	})
	for _, p := range pols {
		field(p.name)
		for _, in := range p.inputs {
			field(in)
		}
	}
	h.Write(content[:])
	return hex.EncodeToString(h.Sum(nil))
}

// storedResults returns the policy and result of each result of a report
// of either kind, as read from the API server.
func storedResults(obj client.Object) [][2]string {
	var out [][2]string
	switch r := obj.(type) {
	case *openreportsv1alpha1.Report:
		for _, res := range r.Results {
			out = append(out, [2]string{res.Policy, string(res.Result)})
		}
	case *openreportsv1alpha1.ClusterReport:
		for _, res := range r.Results {
			out = append(out, [2]string{res.Policy, string(res.Result)})
		}
	case *wgpolicyv1alpha2.PolicyReport:
		for _, res := range r.Results {
			out = append(out, [2]string{res.Policy, string(res.Result)})
		}
	case *wgpolicyv1alpha2.ClusterPolicyReport:
		for _, res := range r.Results {
			out = append(out, [2]string{res.Policy, string(res.Result)})
		}
	}
	return out
}
