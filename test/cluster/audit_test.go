//go:build cluster

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	wgpolicyv1alpha2 "sigs.k8s.io/wg-policy-prototypes/policy-report/pkg/api/wgpolicyk8s.io/v1alpha2"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/auditscanner"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/policyserver"
	"github.com/wardenhq/warden/internal/testkit"
)

// auditTLS is the certificate material of an audit: the policy server's
// serving pair and the scanner's client pair, from one CA, as files.
type auditTLS struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
}

func newAuditTLS(t *testing.T) auditTLS {
	t.Helper()
	dir := t.TempDir()
	ca := pkitest.NewCA(t, "warden-ca")
	var m auditTLS
	m.caFile = ca.WriteCA(t, dir)
	m.serverCert, m.serverKey = ca.Server(t).WriteFiles(t, dir, "server-")
	m.clientCert, m.clientKey = ca.Client(t, "audit-scanner").WriteFiles(t, dir, "client-")
	return m
}

// startAuditPolicyServer runs the policy server with the policies of doc
// over HTTPS on 127.0.0.1, requiring client certificates of the CA of m,
// until the test ends, and returns its base URL once it is ready.
func startAuditPolicyServer(t *testing.T, doc string, m auditTLS) string {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(policies, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	port, readiness := testkit.FreePort(t), testkit.FreePort(t)
	env := map[string]string{"HOME": dir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var logs bytes.Buffer
	go func() {
		done <- policyserver.Main(ctx, []string{"--addr", "127.0.0.1", "--port", fmt.Sprint(port), "--readiness-probe-port", fmt.Sprint(readiness),
			"--policies", policies, "--policies-download-dir", dir, "--cache-dir", "", "--workers", "2",
			"--cert-file", m.serverCert, "--key-file", m.serverKey, "--client-ca-file", m.caFile},
			io.Discard, &logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("policy server exit %d\n%s", code, logs.String())
		}
	})
	eventually(t, "the policy server is ready", func() bool { return ready(readiness) })
	return fmt.Sprintf("https://127.0.0.1:%d", port)
}

// scan is one run of the audit scanner.
type scan struct {
	code   int
	stdout string
	// reports are the lines of stdout, decoded.
	reports []map[string]any
	// counts sums the counts of the progress log lines, one per scope.
	counts map[string]int
	logs   string
}

// runAudit runs the audit-scanner command with args against the cluster of
// kubeconfig.
func runAudit(t *testing.T, kubeconfig string, args ...string) scan {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"KUBECONFIG": kubeconfig}
	var s scan
	s.code = auditscanner.Main(t.Context(), args, &stdout, &stderr, func(k string) string { return env[k] })
	s.stdout, s.logs = stdout.String(), stderr.String()
	s.counts = progressCounts(s.logs)
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("--output-scan line %q: %v", sc.Text(), err)
		}
		s.reports = append(s.reports, doc)
	}
	return s
}

// progressCounts sums the counts of the progress log lines of a run, one
// per scope; "cleanups" counts the scopes whose stale reports were deleted.
func progressCounts(logs string) map[string]int {
	counts := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || (rec["msg"] != "namespace scanned" && rec["msg"] != "cluster-wide resources scanned") {
			continue
		}
		for _, k := range []string{"resources", "reports_created", "reports_updated", "reports_unchanged", "reports_reused", "evaluation_errors",
			"policies_audited", "policies_skipped", "policies_errored"} {
			n, _ := rec[k].(float64)
			counts[k] += int(n)
		}
		if rec["stale_reports_deleted"] == true {
			counts["cleanups"]++
		}
	}
	return counts
}

// auditPolicy returns a policy of kind (a ClusterAdmissionPolicy, or an
// AdmissionPolicy when namespace is set) running the labels test module,
// auditing CREATE of resources of the core group, with backgroundAudit.
func auditPolicy(namespace, name string, resources []string, change func(spec *policiesv1.PolicySpec)) client.Object {
	spec := policiesv1.PolicySpec{
		Module:          "registry://example.com/labels:v1",
		BackgroundAudit: true,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
		}},
	}
	if change != nil {
		change(&spec)
	}
	if namespace != "" {
		return &policiesv1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: policiesv1.AdmissionPolicySpec{PolicySpec: spec}}
	}
	return &policiesv1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: spec}}
}

// createPolicy creates p and sets its status to status, as the controller
// does once its policy server runs it.
func createPolicy(t *testing.T, c client.Client, p client.Object, status policiesv1.PolicyStatusEnum) policiesv1.Policy {
	t.Helper()
	mustCreate(t, c, p)
	pol := p.(policiesv1.Policy)
	pol.SetStatus(status)
	if err := c.Status().Update(t.Context(), p); err != nil {
		t.Fatalf("setting the status of %s: %v", p.GetName(), err)
	}
	return pol
}

// reportsOf returns the reports of kind (Report, ClusterReport,
// PolicyReport, ClusterPolicyReport) in the cluster, as JSON documents, by
// name (namespace/name for the namespaced kinds).
func reportsOf(t *testing.T, c client.Client, kind string) map[string]map[string]any {
	t.Helper()
	var list client.ObjectList
	switch kind {
	case "Report":
		list = &openreportsv1alpha1.ReportList{}
	case "ClusterReport":
		list = &openreportsv1alpha1.ClusterReportList{}
	case "PolicyReport":
		list = &wgpolicyv1alpha2.PolicyReportList{}
	case "ClusterPolicyReport":
		list = &wgpolicyv1alpha2.ClusterPolicyReportList{}
	}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatalf("listing %s: %v", kind, err)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, item := range doc.Items {
		md := item["metadata"].(map[string]any)
		key, _ := md["name"].(string)
		if ns, _ := md["namespace"].(string); ns != "" {
			key = ns + "/" + key
		}
		out[key] = item
	}
	return out
}

// expectedResult is a result of Kubewarden's reports
// (docs/compatibility.md#audit-scanner), timestamp aside.
type expectedResult struct {
	policy, result, message, severity, category string
	properties                                  map[string]string
}

func (e expectedResult) doc() map[string]any {
	d := map[string]any{"source": "kubewarden", "policy": e.policy, "result": e.result, "scored": true, "resourceSelector": map[string]any{}}
	props := map[string]any{}
	for k, v := range e.properties {
		props[k] = v
	}
	d["properties"] = props
	for k, v := range map[string]string{"message": e.message, "severity": e.severity, "category": e.category} {
		if v != "" {
			d[k] = v
		}
	}
	return d
}

// props are the properties of the results of p
// (docs/compatibility.md#audit-scanner).
func props(p policiesv1.Policy, extra ...string) map[string]string {
	m := map[string]string{"policy-resource-version": p.GetResourceVersion(), "policy-uid": string(p.GetUID()), "policy-name": p.GetName()}
	if p.IsMutating() {
		m["mutating"] = "true"
	} else {
		m["validating"] = "true"
	}
	if p.GetNamespace() != "" {
		m["policy-namespace"] = p.GetNamespace()
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// checkReport compares report, a document of any of the four kinds,
// field by field with what Kubewarden writes for obj
// (docs/compatibility.md#audit-scanner).
func checkReport(t *testing.T, report map[string]any, obj client.Object, apiVersion, kind, runUID string, summary map[string]int, results []expectedResult) {
	t.Helper()
	where := fmt.Sprintf("report of %s %s/%s", kind, obj.GetNamespace(), obj.GetName())
	if report == nil {
		t.Errorf("%s: missing", where)
		return
	}
	md := report["metadata"].(map[string]any)
	if md["name"] != string(obj.GetUID()) || (md["namespace"] != nil && md["namespace"] != obj.GetNamespace()) {
		t.Errorf("%s: named %v/%v", where, md["namespace"], md["name"])
	}
	wantLabels := map[string]any{"app.kubernetes.io/managed-by": "kubewarden", "kubewarden.io/policyreport-version": "v2", "kubewarden.io/audit-scanner-run-uid": runUID}
	if !reflect.DeepEqual(md["labels"], wantLabels) {
		t.Errorf("%s: labels %v, want %v", where, md["labels"], wantLabels)
	}
	wantOwners := []any{map[string]any{"apiVersion": apiVersion, "kind": kind, "name": obj.GetName(), "uid": string(obj.GetUID())}}
	if !reflect.DeepEqual(md["ownerReferences"], wantOwners) {
		t.Errorf("%s: ownerReferences %v, want %v", where, md["ownerReferences"], wantOwners)
	}
	wantScope := map[string]any{"apiVersion": apiVersion, "kind": kind, "name": obj.GetName(), "uid": string(obj.GetUID()), "resourceVersion": obj.GetResourceVersion()}
	if obj.GetNamespace() != "" {
		wantScope["namespace"] = obj.GetNamespace()
	}
	if !reflect.DeepEqual(report["scope"], wantScope) {
		t.Errorf("%s: scope %v, want %v", where, report["scope"], wantScope)
	}
	wantSummary := map[string]any{}
	for _, k := range []string{"pass", "fail", "warn", "error", "skip"} {
		wantSummary[k] = float64(summary[k])
	}
	if !reflect.DeepEqual(report["summary"], wantSummary) {
		t.Errorf("%s: summary %v, want %v", where, report["summary"], wantSummary)
	}
	got, _ := report["results"].([]any)
	var gotResults []any
	for _, r := range got {
		r := r.(map[string]any)
		ts, _ := r["timestamp"].(map[string]any)
		if secs, _ := ts["seconds"].(float64); secs <= 0 {
			t.Errorf("%s: result of %v has timestamp %v", where, r["policy"], r["timestamp"])
		}
		c := map[string]any{}
		for k, v := range r {
			if k != "timestamp" {
				c[k] = v
			}
		}
		gotResults = append(gotResults, c)
	}
	var wantResults []any
	for _, r := range results {
		wantResults = append(wantResults, r.doc())
	}
	if !reflect.DeepEqual(gotResults, wantResults) {
		t.Errorf("%s: results\n%v\nwant\n%v", where, gotResults, wantResults)
	}
}

func runUIDOf(t *testing.T, reports map[string]map[string]any) string {
	t.Helper()
	uids := map[string]bool{}
	for _, r := range reports {
		labels, _ := r["metadata"].(map[string]any)["labels"].(map[string]any)
		uid, _ := labels["kubewarden.io/audit-scanner-run-uid"].(string)
		uids[uid] = true
	}
	if len(uids) != 1 {
		t.Fatalf("the reports have run-uids %v, want one", uids)
	}
	for uid := range uids {
		return uid
	}
	return ""
}

func generationOf(r map[string]any) float64 {
	g, _ := r["metadata"].(map[string]any)["generation"].(float64)
	return g
}

// startAuditCluster starts an API server that serves the policy and report
// CRDs, with a client whose scheme knows them.
func startAuditCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	scheme, err := auditscanner.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return clustertest.Start(t, clustertest.WithScheme(scheme),
		clustertest.WithCRDDirectory("../../config/crd/bases", "../../config/crd/reports"))
}

// TestAudit runs the audit scanner against a real API server and a real
// policy server over mutual TLS: policy selection, both report kinds,
// reports compared field by field with Kubewarden's
// (docs/compatibility.md#audit-scanner), namespaced and
// cluster-wide resources, ignored namespaces, a second run that patches
// only the run-uid of unchanged reports and deletes the stale ones, a
// policy server that is down or refuses the scanner without its client
// certificate, and the cleanup of legacy reports.
//
// The subtests share the API server, the namespaces, the policies and the
// policy server, made here; each starts from the same state (fresh: the
// ConfigMaps as made here, no report) and makes the reports it needs, so
// that each runs alone (go test -tags cluster -run 'TestAudit/<name>').
func TestAudit(t *testing.T) {
	cl := startAuditCluster(t)
	c := cl.Client
	kubeconfig := writeKubeconfig(t, cl.Config)

	// Namespaces: team-a (prod), team-b (dev, whose own label the
	// namespace policy denies), ignored, and the Kubewarden namespace.
	nss := map[string]*corev1.Namespace{}
	for _, ns := range []struct {
		name   string
		labels map[string]string
	}{{"team-a", map[string]string{"env": "prod"}}, {"team-b", map[string]string{"env": "dev", "forbidden": "yes"}}, {"ignored", nil}, {"kubewarden", nil}} {
		nss[ns.name] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: ns.labels}}
		mustCreate(t, c, nss[ns.name])
	}
	// The ConfigMaps, by namespace/name; fresh makes them again, with new
	// uids, for each subtest.
	cms := map[string]*corev1.ConfigMap{}
	makeConfigMaps := func(t *testing.T) {
		t.Helper()
		for _, cm := range []struct {
			ns, name string
			labels   map[string]string
		}{
			{"team-a", "good", nil},
			{"team-a", "bad", map[string]string{"forbidden": "yes"}},
			{"team-a", "optout", map[string]string{"audit": "skip", "forbidden": "yes"}},
			{"team-b", "bad", map[string]string{"forbidden": "yes"}},
			{"ignored", "bad", map[string]string{"forbidden": "yes"}},
			{"kubewarden", "bad", map[string]string{"forbidden": "yes"}},
		} {
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.ns, Name: cm.name, Labels: cm.labels}}
			mustCreate(t, c, obj)
			cms[cm.ns+"/"+cm.name] = obj
		}
	}
	makeConfigMaps(t)

	active := policiesv1.PolicyStatusActive
	denyForbidden := createPolicy(t, c, auditPolicy("", "deny-forbidden", []string{"configmaps"}, func(s *policiesv1.PolicySpec) {
		s.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "audit", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"skip"}}}}
	}), active)
	denyForbidden.SetAnnotations(map[string]string{policiesv1.AnnotationSeverity: "high", policiesv1.AnnotationCategory: "Labels"})
	if err := c.Update(t.Context(), denyForbidden.(client.Object)); err != nil {
		t.Fatal(err)
	}
	prodOnly := createPolicy(t, c, auditPolicy("", "prod-only", []string{"configmaps"}, func(s *policiesv1.PolicySpec) {
		s.Mode, s.Mutating = policiesv1.PolicyModeMonitor, true
	}), active)
	prodOnlyCAP := prodOnly.(*policiesv1.ClusterAdmissionPolicy)
	prodOnlyCAP.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	prodOnlyCAP.Annotations = map[string]string{policiesv1.AnnotationSeverity: "critical"}
	if err := c.Update(t.Context(), prodOnlyCAP); err != nil {
		t.Fatal(err)
	}
	denyNamespaces := createPolicy(t, c, auditPolicy("", "deny-ns", []string{"namespaces"}, nil), active)
	local := createPolicy(t, c, auditPolicy("team-b", "local", []string{"configmaps"}, nil), active)
	// Skipped: a wildcard, no CREATE, no backgroundAudit, not active.
	createPolicy(t, c, auditPolicy("", "wildcard", []string{"*"}, nil), active)
	createPolicy(t, c, auditPolicy("", "no-create", []string{"configmaps"}, func(s *policiesv1.PolicySpec) {
		s.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	}), active)
	createPolicy(t, c, auditPolicy("", "no-background", []string{"configmaps"}, func(s *policiesv1.PolicySpec) { s.BackgroundAudit = false }), active)
	createPolicy(t, c, auditPolicy("", "pending", []string{"configmaps"}, nil), policiesv1.PolicyStatusPending)
	// Errored: a resource the API server does not serve.
	createPolicy(t, c, auditPolicy("", "unknown", []string{"frobnicators"}, nil), active)
	for _, p := range []policiesv1.Policy{denyForbidden, prodOnly, denyNamespaces, local} {
		get(t, c, p.(client.Object))
	}

	module := policybuild.ForTest(t, "labels")
	doc := ""
	for id, denied := range map[string]string{
		"clusterwide-deny-forbidden": "forbidden", "clusterwide-prod-only": "nothing",
		"clusterwide-deny-ns": "forbidden", "namespaced-team-b-local": "forbidden",
	} {
		doc += fmt.Sprintf("%s:\n  module: file://%s\n  settings:\n    denied_labels: [%q]\n", id, module, denied)
	}
	m := newAuditTLS(t)
	url := startAuditPolicyServer(t, doc, m)
	// The namespace list is read from the watch cache: wait until it
	// holds every namespace.
	eventually(t, "the watch cache holds the namespaces", func() bool {
		var list corev1.NamespaceList
		if err := c.List(t.Context(), &list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
			return false
		}
		return len(list.Items) >= 8
	})

	// kube-system is ignored too: the API server itself may change the
	// objects there between runs.
	const ignore = "ignored,kube-system"
	// Most runs relabel every report, as Kubewarden does: the run-uid
	// labels are what they check; one subtest runs the default.
	base := []string{"-u", url, "-f", m.caFile, "--client-cert", m.clientCert, "--client-key", m.clientKey,
		"-i", ignore, "--page-size", "2", "--parallel-namespaces", "2", "-o", "--keep-unchanged-reports=false"}
	openReports := append([]string{"--report-kind", "openreports"}, base...)

	// Namespaced configmap scopes: 4 skipped (wildcard, no-create,
	// no-background, pending) and 1 errored (unknown). The cluster-wide
	// scope: wildcard and no-create skipped (the others target no
	// cluster-wide resource), unknown errored.
	deny := func(label string) string { return fmt.Sprintf("label %s is denied", label) }
	denyForbiddenResult := func(result, msg string) expectedResult {
		return expectedResult{policy: "clusterwide-deny-forbidden", result: result, message: msg, severity: "high", category: "Labels", properties: props(denyForbidden)}
	}
	prodOnlyResult := expectedResult{policy: "clusterwide-prod-only", result: "pass", severity: "info", properties: props(prodOnly)}
	localResult := func(result, msg string) expectedResult {
		return expectedResult{policy: "namespaced-team-b-local", result: result, message: msg, properties: props(local)}
	}
	nsResult := func(result, msg string) expectedResult {
		return expectedResult{policy: "clusterwide-deny-ns", result: result, message: msg, properties: props(denyNamespaces)}
	}

	// fresh brings the cluster back to the state the subtests start from:
	// no report of any kind, and the ConfigMaps as makeConfigMaps makes
	// them (the subtests change, delete and add some).
	fresh := func(t *testing.T) {
		t.Helper()
		var namespaces corev1.NamespaceList
		if err := c.List(t.Context(), &namespaces); err != nil {
			t.Fatal(err)
		}
		for _, o := range []client.Object{&openreportsv1alpha1.ClusterReport{}, &wgpolicyv1alpha2.ClusterPolicyReport{}} {
			if err := c.DeleteAllOf(t.Context(), o); err != nil {
				t.Fatalf("deleting the %T: %v", o, err)
			}
		}
		for _, ns := range namespaces.Items {
			for _, o := range []client.Object{&openreportsv1alpha1.Report{}, &wgpolicyv1alpha2.PolicyReport{}, &corev1.ConfigMap{}} {
				if _, ok := o.(*corev1.ConfigMap); ok && nss[ns.Name] == nil {
					continue
				}
				if err := c.DeleteAllOf(t.Context(), o, client.InNamespace(ns.Name)); err != nil {
					t.Fatalf("deleting the %T of %s: %v", o, ns.Name, err)
				}
			}
		}
		makeConfigMaps(t)
	}
	// firstRun runs the scanner once on a fresh cluster, as most subtests
	// do first: it writes a report of every object audited.
	firstRun := func(t *testing.T) {
		t.Helper()
		fresh(t)
		if s := runAudit(t, kubeconfig, openReports...); s.code != 0 || s.counts["reports_created"] == 0 {
			t.Fatalf("the first run: exit %d, counts %v\n%s", s.code, s.counts, s.logs)
		}
	}

	t.Run("first run writes OpenReports", func(t *testing.T) {
		fresh(t)
		metricsFile := filepath.Join(t.TempDir(), "audit.prom")
		s := runAudit(t, kubeconfig, append([]string{"--metrics-file", metricsFile}, openReports...)...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		reports, clusterReports := reportsOf(t, c, "Report"), reportsOf(t, c, "ClusterReport")
		run1UID := runUIDOf(t, reports)
		const av, kind = "v1", "ConfigMap"
		checkReport(t, reports["team-a/"+string(cms["team-a/good"].UID)], cms["team-a/good"], av, kind, run1UID,
			map[string]int{"pass": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("pass", ""), prodOnlyResult})
		checkReport(t, reports["team-a/"+string(cms["team-a/bad"].UID)], cms["team-a/bad"], av, kind, run1UID,
			map[string]int{"pass": 1, "fail": 1, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("fail", deny("forbidden")), prodOnlyResult})
		// The objectSelector leaves deny-forbidden out.
		checkReport(t, reports["team-a/"+string(cms["team-a/optout"].UID)], cms["team-a/optout"], av, kind, run1UID,
			map[string]int{"pass": 1, "skip": 4, "error": 1}, []expectedResult{prodOnlyResult})
		// The namespaceSelector leaves prod-only out; the AdmissionPolicy
		// of team-b applies.
		checkReport(t, reports["team-b/"+string(cms["team-b/bad"].UID)], cms["team-b/bad"], av, kind, run1UID,
			map[string]int{"fail": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("fail", deny("forbidden")), localResult("fail", deny("forbidden"))})
		for _, key := range []string{"ignored/bad", "kubewarden/bad"} {
			if _, ok := reports[key[:strings.Index(key, "/")]+"/"+string(cms[key].UID)]; ok {
				t.Errorf("the ignored configmap %s has a report", key)
			}
		}
		for _, name := range []string{"team-a", "team-b", "ignored", "kubewarden"} {
			ns := get(t, c, nss[name])
			want, msg := "pass", ""
			if name == "team-b" {
				want, msg = "fail", deny("forbidden")
			}
			sum := map[string]int{want: 1, "skip": 2, "error": 1}
			checkReport(t, clusterReports[string(ns.GetUID())], ns, "v1", "Namespace", run1UID, sum, []expectedResult{nsResult(want, msg)})
		}
		// Every report is on stdout, as written.
		if len(s.reports) != len(reports)+len(clusterReports) {
			t.Errorf("%d reports on stdout, %d in the cluster", len(s.reports), len(reports)+len(clusterReports))
		}
		for _, out := range s.reports {
			md := out["metadata"].(map[string]any)
			key, _ := md["name"].(string)
			stored := clusterReports[key]
			if ns, _ := md["namespace"].(string); ns != "" {
				stored = reports[ns+"/"+key]
			}
			if stored == nil || out["apiVersion"] != "openreports.io/v1alpha1" || !reflect.DeepEqual(out["results"], stored["results"]) {
				t.Errorf("printed report %v differs from the stored one %v", out, stored)
			}
		}
		if s.counts["reports_created"] != len(s.reports) || s.counts["reports_updated"]+s.counts["reports_unchanged"] != 0 {
			t.Errorf("counts %v", s.counts)
		}
		metrics, err := os.ReadFile(metricsFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"warden_audit_last_run_success 1",
			fmt.Sprintf(`warden_audit_reports{operation="created"} %d`, len(s.reports)),
			`warden_audit_policy_results{policy_name="clusterwide-deny-forbidden",result="fail"} 2`,
			`warden_audit_policy_results{policy_name="namespaced-team-b-local",result="fail"} 1`,
		} {
			if !strings.Contains(string(metrics), want+"\n") {
				t.Errorf("the metrics lack %q:\n%s", want, metrics)
			}
		}
	})

	t.Run("second run patches the run-uid of unchanged reports and deletes stale ones", func(t *testing.T) {
		firstRun(t)
		before := reportsOf(t, c, "Report")
		run1UID := runUIDOf(t, before)
		// good goes: its report is stale. bad loses its label: its report
		// changes.
		good, bad := cms["team-a/good"], cms["team-a/bad"]
		if err := c.Delete(t.Context(), good); err != nil {
			t.Fatal(err)
		}
		bad.Labels = nil
		if err := c.Update(t.Context(), bad); err != nil {
			t.Fatal(err)
		}
		s := runAudit(t, kubeconfig, openReports...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		reports := reportsOf(t, c, "Report")
		run2UID := runUIDOf(t, reports)
		if run2UID == run1UID {
			t.Fatal("both runs have the same run-uid")
		}
		if _, ok := reports["team-a/"+string(good.UID)]; ok {
			t.Error("the report of the deleted configmap was not deleted")
		}
		checkReport(t, reports["team-a/"+string(bad.UID)], bad, "v1", "ConfigMap", run2UID,
			map[string]int{"pass": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("pass", ""), prodOnlyResult})
		for key, r := range reports {
			old := before[key]
			switch {
			case key == "team-a/"+string(bad.UID):
				if generationOf(r) != generationOf(old)+1 {
					t.Errorf("the changed report %s was not updated: generation %v then %v", key, generationOf(old), generationOf(r))
				}
			case old == nil:
				t.Errorf("report %s is new", key)
			default:
				// Only the run-uid label changed: same generation, same
				// timestamps.
				if generationOf(r) != generationOf(old) || !reflect.DeepEqual(r["results"], old["results"]) {
					t.Errorf("the unchanged report %s was rewritten:\n%v\nthen\n%v", key, old, r)
				}
			}
		}
		clusterReports := reportsOf(t, c, "ClusterReport")
		if runUIDOf(t, clusterReports) != run2UID {
			t.Error("the cluster reports do not carry the second run-uid")
		}
		total := len(reports) + len(clusterReports)
		// Only bad was evaluated again: the others' results were reused.
		if s.counts["reports_updated"] != 1 || s.counts["reports_unchanged"] != total-1 || s.counts["reports_reused"] != total-1 ||
			s.counts["reports_created"] != 0 || s.counts["cleanups"] != 1 {
			t.Errorf("counts %v, want 1 updated, %d unchanged and reused, 1 cleanup", s.counts, total-1)
		}
		if len(s.reports) != total {
			t.Errorf("%d reports on stdout, %d in the cluster: every report of the run is printed, changed or not", len(s.reports), total)
		}
	})

	// touch changes obj's resourceVersion, and nothing else the policies
	// look at.
	touches := 0
	touch := func(t *testing.T, obj client.Object) {
		t.Helper()
		touches++
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.warden.io/touched":"%d"}}}`, touches)
		if err := c.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	// errored returns the keys (as reportsOf's) of the reports, of both
	// scopes, that have an error result.
	errored := func(t *testing.T) []string {
		t.Helper()
		var keys []string
		for _, kind := range []string{"Report", "ClusterReport"} {
			for key, r := range reportsOf(t, c, kind) {
				results, _ := r["results"].([]any)
				for _, res := range results {
					if res.(map[string]any)["result"] == "error" {
						keys = append(keys, key)
						break
					}
				}
			}
		}
		slices.Sort(keys)
		return keys
	}
	downURL := func(t *testing.T) string {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "https://" + l.Addr().String()
	}

	t.Run("a run evaluates again only what changed since the report was written", func(t *testing.T) {
		firstRun(t)
		down := []string{"--report-kind", "openreports", "-u", downURL(t), "-f", m.caFile,
			"--client-cert", m.clientCert, "--client-key", m.clientKey, "-i", ignore, "--keep-unchanged-reports=false"}
		before, beforeCluster := reportsOf(t, c, "Report"), reportsOf(t, c, "ClusterReport")
		total := len(before) + len(beforeCluster)
		// Nothing changed: the run needs no policy server. It still counts
		// the results it kept in its metrics.
		metricsFile := filepath.Join(t.TempDir(), "audit.prom")
		s := runAudit(t, kubeconfig, append([]string{"--metrics-file", metricsFile}, down...)...)
		if s.code != 0 {
			t.Fatalf("exit %d: nothing changed, yet the run asked the policy server\n%s", s.code, s.logs)
		}
		metrics, err := os.ReadFile(metricsFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"warden_audit_last_run_success 1",
			fmt.Sprintf("warden_audit_resources_reused %d", total),
			`warden_audit_policy_results{policy_name="namespaced-team-b-local",result="fail"} 1`,
			`warden_audit_policy_results{policy_name="clusterwide-deny-ns",result="fail"} 1`,
		} {
			if !strings.Contains(string(metrics), want+"\n") {
				t.Errorf("the metrics lack %q:\n%s", want, metrics)
			}
		}
		if s.counts["reports_reused"] != total || s.counts["reports_unchanged"] != total || s.counts["resources"] != total || s.counts["cleanups"] != 0 {
			t.Errorf("counts %v, want all %d reports reused", s.counts, total)
		}
		reports, clusterReports := reportsOf(t, c, "Report"), reportsOf(t, c, "ClusterReport")
		runUID := runUIDOf(t, reports)
		if runUIDOf(t, clusterReports) != runUID || runUID == runUIDOf(t, before) {
			t.Error("the reused reports do not carry the new run-uid")
		}
		for key, r := range reports {
			if generationOf(r) != generationOf(before[key]) || !reflect.DeepEqual(r["results"], before[key]["results"]) {
				t.Errorf("the reused report %s was rewritten", key)
			}
		}

		// Changed: an object, a policy, a report's inputs annotation, and
		// another report's, removed. Those four are evaluated again (the
		// policy server is down: their results are errors), not the others.
		teamABad, optout, teamBBad := cms["team-a/bad"], cms["team-a/optout"], cms["team-b/bad"]
		touch(t, teamABad)
		touch(t, local.(client.Object))
		patchReport := func(r client.Object, value string) {
			t.Helper()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, auditscanner.AnnotationInputs, value)
			if err := c.Patch(t.Context(), r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatal(err)
			}
		}
		patchReport(&openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: string(optout.UID)}}, `"0123abcd"`)
		defaultNS := get(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		patchReport(&openreportsv1alpha1.ClusterReport{ObjectMeta: metav1.ObjectMeta{Name: string(defaultNS.UID)}}, "null")
		s = runAudit(t, kubeconfig, down...)
		if s.code != 1 {
			t.Fatalf("exit %d, want 1: the changed objects need the policy server, down\n%s", s.code, s.logs)
		}
		want := []string{string(defaultNS.UID), "team-a/" + string(teamABad.UID), "team-a/" + string(optout.UID), "team-b/" + string(teamBBad.UID)}
		slices.Sort(want)
		if got := errored(t); !reflect.DeepEqual(got, want) {
			t.Errorf("reports evaluated again (errored) %v, want %v", got, want)
		}
		if s.counts["reports_reused"] != total-len(want) {
			t.Errorf("counts %v, want %d reused", s.counts, total-len(want))
		}

		// Error results are never reused: with the policy server back,
		// those four are evaluated again.
		s = runAudit(t, kubeconfig, openReports...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		if got := errored(t); len(got) != 0 {
			t.Errorf("reports still errored: %v", got)
		}
		if s.counts["reports_reused"] != total-len(want) || s.counts["reports_updated"] != len(want) {
			t.Errorf("counts %v, want %d reused, %d updated", s.counts, total-len(want), len(want))
		}
		reports = reportsOf(t, c, "Report")
		checkReport(t, reports["team-b/"+string(teamBBad.UID)], get(t, c, teamBBad), "v1", "ConfigMap", runUIDOf(t, reports),
			map[string]int{"fail": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("fail", deny("forbidden")), localResult("fail", deny("forbidden"))})

		// --disable-result-reuse evaluates everything again.
		s = runAudit(t, kubeconfig, append([]string{"--disable-result-reuse"}, down...)...)
		if s.code != 1 || s.counts["reports_reused"] != 0 || s.counts["evaluation_errors"] == 0 {
			t.Errorf("--disable-result-reuse: exit %d, counts %v, want every object evaluated", s.code, s.counts)
		}
		if s = runAudit(t, kubeconfig, openReports...); s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
	})

	t.Run("by default a run writes nothing for unchanged reports and deletes stale ones by name", func(t *testing.T) {
		firstRun(t)
		// The last of a flag's values wins: this drops base's =false.
		keep := append(slices.Clone(openReports), "--keep-unchanged-reports=true")
		// gone gets a report, then goes: its report is stale.
		gone := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "gone", Labels: map[string]string{"forbidden": "yes"}}}
		mustCreate(t, c, gone)
		if s := runAudit(t, kubeconfig, openReports...); s.code != 0 || s.counts["reports_created"] != 1 {
			t.Fatalf("exit %d, counts %v, want gone's report created\n%s", s.code, s.counts, s.logs)
		}
		if err := c.Delete(t.Context(), gone); err != nil {
			t.Fatal(err)
		}
		before, beforeCluster := reportsOf(t, c, "Report"), reportsOf(t, c, "ClusterReport")
		oldUID := runUIDOf(t, before)
		bad := cms["team-a/bad"]
		touch(t, bad) // evaluated again: its report's scope has the new resourceVersion
		total := len(before) + len(beforeCluster) - 1

		s := runAudit(t, kubeconfig, keep...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		reports, clusterReports := reportsOf(t, c, "Report"), reportsOf(t, c, "ClusterReport")
		if _, ok := reports["team-a/"+string(gone.UID)]; ok {
			t.Error("the report of the deleted configmap was not deleted")
		}
		rv := func(r map[string]any) any { return r["metadata"].(map[string]any)["resourceVersion"] }
		newUID := ""
		for key, r := range reports {
			if key == "team-a/"+string(bad.UID) {
				newUID = r["metadata"].(map[string]any)["labels"].(map[string]any)["kubewarden.io/audit-scanner-run-uid"].(string)
				continue
			}
			if rv(r) != rv(before[key]) {
				t.Errorf("the unchanged report %s was written: resourceVersion %v then %v", key, rv(before[key]), rv(r))
			}
		}
		for key, r := range clusterReports {
			if rv(r) != rv(beforeCluster[key]) {
				t.Errorf("the unchanged cluster report %s was written", key)
			}
		}
		if newUID == "" || newUID == oldUID {
			t.Errorf("bad's report, evaluated again, has run-uid %q, want the new run's", newUID)
		}
		if s.counts["reports_updated"] != 1 || s.counts["reports_unchanged"] != total-1 || s.counts["reports_reused"] != total-1 || s.counts["cleanups"] != 1 {
			t.Errorf("counts %v, want 1 updated, %d unchanged and reused, 1 cleanup", s.counts, total-1)
		}
		if len(s.reports) != total {
			t.Errorf("%d reports on stdout, want every report of the run (%d)", len(s.reports), total)
		}

		// Without the flag, every report carries the run's uid again and
		// none is deleted.
		s = runAudit(t, kubeconfig, openReports...)
		reports = reportsOf(t, c, "Report")
		if s.code != 0 || len(reports)+len(clusterReports) != total || s.counts["cleanups"] != 0 {
			t.Fatalf("exit %d, %d reports, counts %v, want %d reports and no cleanup\n%s", s.code, len(reports)+len(clusterReports), s.counts, total, s.logs)
		}
		if runUIDOf(t, reports) != runUIDOf(t, reportsOf(t, c, "ClusterReport")) {
			t.Error("the reports do not carry one run-uid")
		}
	})

	// errorRun runs the scanner with args against a policy server that
	// cannot answer, after a first run, changing team-a/bad (so that it is
	// evaluated again) and deleting team-a/optout (so that its report is
	// stale), and checks that it fails, that the results are errors
	// carrying wantMessage, and that no report was deleted: the run is
	// incomplete.
	errorRun := func(t *testing.T, wantMessage string, args ...string) {
		t.Helper()
		firstRun(t)
		if err := c.Delete(t.Context(), cms["team-a/optout"]); err != nil {
			t.Fatal(err)
		}
		touch(t, cms["team-a/bad"])
		before := reportsOf(t, c, "Report")
		s := runAudit(t, kubeconfig, args...)
		if s.code != 1 {
			t.Fatalf("exit %d, want 1\n%s", s.code, s.logs)
		}
		after := reportsOf(t, c, "Report")
		for key := range before {
			if after[key] == nil {
				t.Errorf("report %s was deleted", key)
			}
		}
		r := after["team-a/"+string(cms["team-a/bad"].UID)]
		results, _ := r["results"].([]any)
		if len(results) != 2 {
			t.Fatalf("results %v", results)
		}
		for _, res := range results {
			res := res.(map[string]any)
			if msg, _ := res["message"].(string); res["result"] != "error" || !strings.Contains(msg, wantMessage) {
				t.Errorf("result %v, want an error with %q", res, wantMessage)
			}
		}
		if sum := r["summary"].(map[string]any); sum["error"] != float64(1+2) || sum["pass"] != float64(0) {
			t.Errorf("summary %v", sum)
		}
		if s.counts["cleanups"] != 0 {
			t.Errorf("%d cleanups", s.counts["cleanups"])
		}
	}
	t.Run("mutual TLS refuses the scanner without its client certificate", func(t *testing.T) {
		errorRun(t, "policy server unreachable", "--report-kind", "openreports", "-u", url, "-f", m.caFile, "-i", ignore)
	})
	t.Run("a policy server that is down", func(t *testing.T) {
		down := downURL(t)
		metricsFile := filepath.Join(t.TempDir(), "audit.prom")
		errorRun(t, "connection refused", "--report-kind", "openreports", "-u", down, "-f", m.caFile,
			"--client-cert", m.clientCert, "--client-key", m.clientKey, "-i", ignore, "--metrics-file", metricsFile)
		if metrics, err := os.ReadFile(metricsFile); err != nil || !strings.Contains(string(metrics), "warden_audit_last_run_success 0\n") {
			t.Errorf("metrics of a failed run: %v\n%s", err, metrics)
		}
	})

	t.Run("legacy PolicyReports", func(t *testing.T) {
		firstRun(t)
		s := runAudit(t, kubeconfig, base...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		reports, clusterReports := reportsOf(t, c, "PolicyReport"), reportsOf(t, c, "ClusterPolicyReport")
		runUID := runUIDOf(t, reports)
		bad := get(t, c, cms["team-b/bad"])
		checkReport(t, reports["team-b/"+string(bad.GetUID())], bad, "v1", "ConfigMap", runUID,
			map[string]int{"fail": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("fail", deny("forbidden")), localResult("fail", deny("forbidden"))})
		teamB := get(t, c, nss["team-b"])
		checkReport(t, clusterReports[string(teamB.GetUID())], teamB, "v1", "Namespace", runUID,
			map[string]int{"fail": 1, "skip": 2, "error": 1}, []expectedResult{nsResult("fail", deny("forbidden"))})
		for _, out := range s.reports {
			if out["apiVersion"] != "wgpolicyk8s.io/v1alpha2" {
				t.Errorf("printed report of %v", out["apiVersion"])
			}
		}
		if n := len(reportsOf(t, c, "Report")); n == 0 {
			t.Error("a PolicyReport run deleted the OpenReports")
		}
		// A run writing OpenReports deletes the legacy reports first.
		s = runAudit(t, kubeconfig, openReports...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		if n, m := len(reportsOf(t, c, "PolicyReport")), len(reportsOf(t, c, "ClusterPolicyReport")); n+m != 0 {
			t.Errorf("%d PolicyReports and %d ClusterPolicyReports left", n, m)
		}
	})

	t.Run("a report changed by someone else is rewritten", func(t *testing.T) {
		firstRun(t)
		bad := get(t, c, cms["team-b/bad"])
		report := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: string(bad.GetUID())}}
		get(t, c, report)
		// The run-uid patch relies on this: a merge patch naming a stale
		// resourceVersion conflicts.
		stale := []byte(fmt.Sprintf(`{"metadata":{"labels":{"kubewarden.io/audit-scanner-run-uid":"x"},"resourceVersion":"%d"}}`, 1))
		if err := c.Patch(t.Context(), report.DeepCopy(), client.RawPatch(types.MergePatchType, stale)); !apierrors.IsConflict(err) {
			t.Fatalf("a merge patch at a stale resourceVersion: %v, want a conflict", err)
		}
		tamper := []byte(`{"summary":{"pass":99},"results":null}`)
		if err := c.Patch(t.Context(), report.DeepCopy(), client.RawPatch(types.MergePatchType, tamper)); err != nil {
			t.Fatal(err)
		}
		s := runAudit(t, kubeconfig, openReports...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		reports := reportsOf(t, c, "Report")
		checkReport(t, reports["team-b/"+string(bad.GetUID())], bad, "v1", "ConfigMap", runUIDOf(t, reports),
			map[string]int{"fail": 2, "skip": 4, "error": 1}, []expectedResult{denyForbiddenResult("fail", deny("forbidden")), localResult("fail", deny("forbidden"))})
		if s.counts["reports_updated"] != 1 || s.counts["reports_created"] != 0 {
			t.Errorf("counts %v, want the tampered report updated, nothing created", s.counts)
		}
	})

	t.Run("--cluster and --namespace scan one scope", func(t *testing.T) {
		firstRun(t)
		before := reportsOf(t, c, "Report")
		s := runAudit(t, kubeconfig, append([]string{"-c", "--disable-store", "--report-kind", "openreports"}, base...)...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		var namespaces corev1.NamespaceList
		if err := c.List(t.Context(), &namespaces); err != nil {
			t.Fatal(err)
		}
		if len(s.reports) != len(namespaces.Items) {
			t.Errorf("%d reports printed, want one per namespace (%d)", len(s.reports), len(namespaces.Items))
		}
		for _, r := range s.reports {
			if r["kind"] != "ClusterReport" {
				t.Errorf("--cluster printed a %v", r["kind"])
			}
		}
		s = runAudit(t, kubeconfig, append([]string{"-n", "team-a", "--disable-store", "--report-kind", "openreports"}, base...)...)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		// One report per ConfigMap of team-a (good, bad, optout).
		if len(s.reports) != 3 {
			t.Errorf("--namespace team-a printed %d reports, want 3", len(s.reports))
		}
		for _, r := range s.reports {
			if r["kind"] != "Report" || r["metadata"].(map[string]any)["namespace"] != "team-a" {
				t.Errorf("--namespace team-a printed %v", r)
			}
		}
		if strings.Count(s.logs, `"msg":"namespace scanned"`) != 1 || strings.Contains(s.logs, "cluster-wide resources scanned") {
			t.Errorf("--namespace team-a scanned more:\n%s", s.logs)
		}
		if after := reportsOf(t, c, "Report"); !reflect.DeepEqual(after, before) {
			t.Error("--disable-store changed the reports")
		}
	})

	t.Run("without --policy-server-url, a policy without its PolicyServer's Service is errored", func(t *testing.T) {
		s := runAudit(t, kubeconfig, "-n", "team-b", "--disable-store", "-o", "-f", m.caFile,
			"--client-cert", m.clientCert, "--client-key", m.clientKey)
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		// deny-forbidden and local are errored too: there is no
		// PolicyServer "default". No policy is left to audit anything.
		if s.counts["policies_audited"] != 0 || s.counts["policies_errored"] != 3 || s.counts["policies_skipped"] != 4 || len(s.reports) != 0 {
			t.Errorf("counts %v, %d reports", s.counts, len(s.reports))
		}
		if !strings.Contains(s.logs, `getting PolicyServer \"default\"`) {
			t.Errorf("logs lack the PolicyServer lookup error:\n%s", s.logs)
		}
	})
}

// TestAuditScale measures, for docs/benchmarks.md, two runs of the audit
// scanner (built and run as its own process) over namespaces × objects
// ConfigMaps and policies ClusterAdmissionPolicies, half of the labels test
// module (waPC), half CEL, against a policy server on this machine: the wall
// time of each run, the API requests it made (from the API server's
// apiserver_request_total), the API server's CPU time and the scanner's
// peak RSS. The second run finds nothing changed, and so does a third with
// --keep-unchanged-reports. It only logs figures, and runs only when
// WARDEN_AUDIT_BENCH is set, to "namespaces,objects,policies" (for example
// 100,10000,20); WARDEN_AUDIT_BENCH_ARGS adds scanner flags.
func TestAuditScale(t *testing.T) {
	spec := os.Getenv("WARDEN_AUDIT_BENCH")
	if spec == "" {
		t.Skip("set WARDEN_AUDIT_BENCH=namespaces,objects,policies (e.g. 100,10000,20) to measure")
	}
	var nNamespaces, nObjects, nPolicies int
	if _, err := fmt.Sscanf(spec, "%d,%d,%d", &nNamespaces, &nObjects, &nPolicies); err != nil || nNamespaces < 1 || nObjects < nNamespaces || nPolicies < 1 {
		t.Fatalf("WARDEN_AUDIT_BENCH=%q: want namespaces,objects,policies", spec)
	}
	binary := filepath.Join(t.TempDir(), "audit-scanner")
	build := exec.Command("go", "build", "-o", binary, "./cmd/audit-scanner")
	build.Dir = policybuild.RepoRootForTest(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the audit scanner: %v\n%s", err, out)
	}
	cl := startAuditCluster(t)
	c := cl.Client
	kubeconfig := writeKubeconfig(t, cl.Config)

	// Half the policies are waPC (the labels test module), half CEL (the
	// policy server's native cel-policy); each denies its own label.
	module := policybuild.ForTest(t, "labels")
	doc := ""
	for i := range nPolicies {
		if i%2 == 1 {
			name := fmt.Sprintf("cel-%d", i)
			createPolicy(t, c, auditPolicy("", name, []string{"configmaps"}, func(s *policiesv1.PolicySpec) {
				s.Module = "registry://ghcr.io/kubewarden/policies/cel-policy:v1.3.0"
			}), policiesv1.PolicyStatusActive)
			doc += fmt.Sprintf("clusterwide-%s:\n  module: builtin://cel\n  settings:\n    validations:\n"+
				"      - expression: \"!has(object.metadata.labels) || !('deny-%d' in object.metadata.labels)\"\n"+
				"        message: \"label deny-%d is denied\"\n", name, i, i)
			continue
		}
		name := fmt.Sprintf("labels-%d", i)
		createPolicy(t, c, auditPolicy("", name, []string{"configmaps"}, nil), policiesv1.PolicyStatusActive)
		doc += fmt.Sprintf("clusterwide-%s:\n  module: file://%s\n  settings:\n    denied_labels: [\"deny-%d\"]\n", name, module, i)
	}
	m := newAuditTLS(t)
	url := startAuditPolicyServer(t, doc, m)

	created := time.Now()
	work := make(chan *corev1.ConfigMap)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for cm := range work {
				if err := c.Create(context.Background(), cm); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	for i := range nNamespaces {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%03d", i)}})
	}
	for i := range nObjects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("bench-%03d", i%nNamespaces), Name: fmt.Sprintf("cm-%05d", i)},
			Data: map[string]string{"key": strings.Repeat("x", 256)}}
		if i%10 == 0 { // one object in ten fails one policy
			cm.Labels = map[string]string{fmt.Sprintf("deny-%d", i%nPolicies): "yes"}
		}
		work <- cm
	}
	close(work)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d ConfigMaps not created", n)
	}
	t.Logf("created %d ConfigMaps in %d namespaces in %s", nObjects, nNamespaces, time.Since(created).Round(time.Millisecond))

	// metrics returns the API server's request counts by verb, and its
	// CPU seconds under apiCPU.
	const apiCPU = "cpu"
	metrics := func() map[string]float64 {
		body, err := kubernetes.NewForConfigOrDie(cl.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		byVerb := map[string]float64{}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "process_cpu_seconds_total ") {
				var v float64
				if _, err := fmt.Sscanf(line, "process_cpu_seconds_total %g", &v); err == nil {
					byVerb[apiCPU] = v
				}
			}
			if !strings.HasPrefix(line, "apiserver_request_total{") {
				continue
			}
			var v float64
			if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v); err != nil {
				continue
			}
			verb := line[strings.Index(line, `verb="`)+6:]
			verb = verb[:strings.Index(verb, `"`)]
			byVerb[verb] += v
		}
		return byVerb
	}
	args := []string{"--report-kind", "openreports", "-u", url, "-f", m.caFile, "--client-cert", m.clientCert, "--client-key", m.clientKey}
	if extra := os.Getenv("WARDEN_AUDIT_BENCH_ARGS"); extra != "" {
		args = append(args, strings.Fields(extra)...)
	}
	runs := []struct {
		name string
		args []string
	}{
		{"first run", args},
		{"second run, nothing changed, --keep-unchanged-reports=false (Kubewarden's relabelling)", append(slices.Clone(args), "--keep-unchanged-reports=false")},
		{"third run, nothing changed (the default: unchanged reports left alone)", args},
	}
	for _, r := range runs {
		run := r.name
		before := metrics()
		var stderr bytes.Buffer
		cmd := exec.Command(binary, r.args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		profiled := profileAPIServer(t, cl.Config, run)
		// The peak RSS is the kernel's high-water mark of the process
		// (VmHWM), as last read before it exits: rusage's maxrss of a
		// child counts the parent's memory from before the exec.
		var hwm atomic.Int64
		exited := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
					for _, l := range strings.Split(string(b), "\n") {
						var kib int64
						if _, err := fmt.Sscanf(l, "VmHWM: %d kB", &kib); err == nil && kib > hwm.Load() {
							hwm.Store(kib)
						}
					}
				}
				select {
				case <-time.After(50 * time.Millisecond):
				case <-exited:
					return
				}
			}
		}()
		err := cmd.Wait()
		wall := time.Since(start)
		close(exited)
		<-polled
		<-profiled
		if err != nil {
			t.Fatalf("%s: %v\n%s", run, err, stderr.String())
		}
		after := metrics()
		total, verbs := 0.0, []string{}
		for verb, n := range after {
			if d := n - before[verb]; d > 0 && verb != apiCPU {
				total += d
				verbs = append(verbs, fmt.Sprintf("%s %.0f", verb, d))
			}
		}
		slices.Sort(verbs)
		usage := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
		load, _ := os.ReadFile("/proc/loadavg")
		counts := progressCounts(stderr.String())
		t.Logf("%s: %s wall, %s CPU, %.0f API requests (%s, the metrics scrape included), API server CPU %.1f s, peak RSS %.1f MB, load average %s; "+
			"%d resources, %d evaluation errors, reports: %d created, %d updated, %d unchanged of which %d reused without evaluation",
			run, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), total, strings.Join(verbs, ", "), after[apiCPU]-before[apiCPU],
			float64(hwm.Load())/1024, strings.Join(strings.Fields(string(load))[:3], " "),
			counts["resources"], counts["evaluation_errors"], counts["reports_created"], counts["reports_updated"], counts["reports_unchanged"], counts["reports_reused"])
		for _, e := range evaluationErrors(stderr.String(), 3) {
			t.Logf("%s: evaluation errors: %s", run, e)
		}
	}
	logReportSizes(t, c)
}

// logReportSizes logs the mean size of the OpenReports Reports as the API
// server stores them (JSON, managedFields left out), and how much of it is
// the annotation by which a run finds a report unchanged (AnnotationInputs),
// the one thing Warden's reports hold that Kubewarden's do not.
func logReportSizes(t *testing.T, c client.Client) {
	t.Helper()
	var list openreportsv1alpha1.ReportList
	if err := c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	var total, annotation, results int
	for i := range list.Items {
		r := &list.Items[i]
		r.ManagedFields = nil
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw)
		if v, ok := r.Annotations[auditscanner.AnnotationInputs]; ok {
			entry, _ := json.Marshal(map[string]string{auditscanner.AnnotationInputs: v})
			annotation += len(entry) - 2 // without the braces
		}
		results += len(r.Results)
	}
	if n := len(list.Items); n > 0 {
		t.Logf("reports: %d, mean %d bytes with %.1f results each, of which %d bytes (%.1f%%) the %s annotation",
			n, total/n, float64(results)/float64(n), annotation/n, 100*float64(annotation)/float64(total), auditscanner.AnnotationInputs)
	}
}

// evaluationErrors returns the most frequent errors of the "policy
// evaluation failed" lines of a scanner's logs, at most limit of them, each
// as "count× error".
func evaluationErrors(logs string, limit int) []string {
	count := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "policy evaluation failed" {
			continue
		}
		msg, _ := rec["error"].(string)
		count[msg]++
	}
	msgs := slices.Collect(maps.Keys(count))
	slices.SortFunc(msgs, func(a, b string) int { return count[b] - count[a] })
	var out []string
	for _, m := range msgs[:min(limit, len(msgs))] {
		out = append(out, fmt.Sprintf("%d× %s", count[m], m))
	}
	return out
}

// profileAPIServer takes a CPU profile of the API server for
// WARDEN_AUDIT_BENCH_PROFILE seconds, if set, into
// WARDEN_AUDIT_BENCH_PROFILE_DIR (default: the test's temporary directory),
// named after the run. The returned channel is closed when it is written.
func profileAPIServer(t *testing.T, config *rest.Config, run string) <-chan struct{} {
	done := make(chan struct{})
	seconds := os.Getenv("WARDEN_AUDIT_BENCH_PROFILE")
	if seconds == "" {
		close(done)
		return done
	}
	dir := os.Getenv("WARDEN_AUDIT_BENCH_PROFILE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	file := filepath.Join(dir, "apiserver-"+strings.Fields(run)[0]+".pprof")
	go func() {
		defer close(done)
		body, err := kubernetes.NewForConfigOrDie(config).RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", seconds).Timeout(10 * time.Minute).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		if err != nil {
			t.Errorf("profiling the API server: %v", err)
			return
		}
		t.Logf("API server CPU profile of the %s: %s", run, file)
	}()
	return done
}
