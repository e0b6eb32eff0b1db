package auditscanner

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAuditResourceKeepsReport audits, as a run does, an object whose
// report the scope's listing found with the inputs it would be evaluated
// with: the object is not evaluated (the policy's server cannot be
// reached, so an evaluation would write error results), and the report
// names the new run only with --keep-unchanged-reports=false, with or
// without --output-scan (which reads the report whole).
func TestAuditResourceKeepsReport(t *testing.T) {
	for _, tc := range []struct {
		name       string
		keep, scan bool
		wantRun    string
	}{
		{name: "left alone", keep: true, wantRun: "old"},
		{name: "left alone, --output-scan", keep: true, scan: true, wantRun: "old"},
		{name: "--keep-unchanged-reports=false: run-uid patched", wantRun: "new"},
		{name: "--keep-unchanged-reports=false, --output-scan: run-uid patched", scan: true, wantRun: "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStoreFixture(t, interceptor.Funcs{})
			f.policy.url = "http://127.0.0.1:1"
			ctx := context.Background()
			old, _ := f.report(t, "old", 100, true)
			if err := f.c.Create(ctx, old); err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			opts.KeepUnchangedReports, opts.OutputScan = tc.keep, tc.scan
			rv, err := newReviewer(&opts, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer rv.close()
			var stdout bytes.Buffer
			r := &run{
				Scanner: &Scanner{opts: opts, kube: f.c, reviewer: rv, kind: f.kind, stdout: &stdout,
					logger: slog.New(slog.DiscardHandler), now: func() time.Time { return time.Unix(200, 0) }},
				runUID:  "new",
				store:   &store{c: f.c, kind: f.kind, runUID: "new", pageSize: 10, keepUnchanged: opts.KeepUnchangedReports},
				metrics: newRunMetrics(),
			}
			existing, err := r.store.existing(ctx, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			var stats scopeStats
			it := item{obj: pod("team-a", "web"), gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, policies: []*auditPolicy{f.policy}}
			if name := r.auditResource(ctx, r.logger, &policySelection{}, it, existing, &stats); name != "uid-web" {
				t.Errorf("auditResource = %q, want the report's name", name)
			}
			if err := stats.err(); err != nil || stats.reused.Load() != 1 || stats.evalErrors.Load() != 0 {
				t.Errorf("reused %d, evaluation errors %d, error %v: want the report reused without an evaluation",
					stats.reused.Load(), stats.evalErrors.Load(), err)
			}
			stored := f.stored(t)
			if run := stored.Labels[LabelRunUID]; run != tc.wantRun {
				t.Errorf("the report names run %q, want %q", run, tc.wantRun)
			}
			if len(stored.Results) != 1 || stored.Results[0].Timestamp.Seconds != 100 {
				t.Errorf("results %+v, want the ones written at time 100", stored.Results)
			}
			if !tc.scan {
				if stdout.Len() != 0 {
					t.Errorf("printed %q without --output-scan", stdout.String())
				}
				return
			}
			var printed struct {
				Kind     string
				Metadata struct{ Labels map[string]string }
			}
			if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil {
				t.Fatalf("--output-scan printed %q: %v", stdout.String(), err)
			}
			if printed.Kind != "Report" || printed.Metadata.Labels[LabelRunUID] != tc.wantRun {
				t.Errorf("printed a %s of run %q, want a Report of run %q", printed.Kind, printed.Metadata.Labels[LabelRunUID], tc.wantRun)
			}
		})
	}
}
