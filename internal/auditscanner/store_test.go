package auditscanner

import (
	"context"
	"errors"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// storeFixture is the report of one object, as a run of the scanner
// builds it, on the fake client: an object store without an API server,
// which conflicts on a stale resourceVersion as the API server does.
type storeFixture struct {
	c      client.Client
	kind   reportKind
	policy *auditPolicy
}

func newStoreFixture(t *testing.T, funcs interceptor.Funcs) *storeFixture {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	p := clusterPolicy("p")
	p.UID, p.ResourceVersion = "uid-p", "5"
	return &storeFixture{
		c:      fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(funcs).Build(),
		kind:   reportKind{openReports: true},
		policy: audited(p),
	}
}

// report returns the report of pod team-a/web written by run at time ts,
// saying allowed or denied, with its AnnotationInputs, and its digest.
func (f *storeFixture) report(t *testing.T, runUID string, ts int64, allowed bool) (client.Object, digest) {
	t.Helper()
	obj := pod("team-a", "web")
	verdict := verdict{allowed: allowed}
	if !allowed {
		verdict.message = "denied"
	}
	o := f.kind.object(newReport(obj, runUID, 0, 0, []evaluation{{policy: f.policy, verdict: verdict}}, ts))
	d, err := digestOf(o)
	if err != nil {
		t.Fatal(err)
	}
	o.SetAnnotations(map[string]string{AnnotationInputs: inputsDigest(obj, []*auditPolicy{f.policy}, 0, 0, d)})
	return o, d
}

// stored returns the report in the store, nil when there is none.
func (f *storeFixture) stored(t *testing.T) *openreportsv1alpha1.Report {
	t.Helper()
	var r openreportsv1alpha1.Report
	err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "uid-web"}, &r)
	if err != nil {
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return nil
	}
	return &r
}

var outcomeNames = map[outcome]string{outcomeCreated: "created", outcomeUpdated: "updated", outcomeUnchanged: "unchanged"}

// TestStoreWrite writes the report of one object after the scope's
// listing, as a run does, and checks what the store holds then: which run
// it names, and whether its results are the ones written before (at time
// 100) or by this run (at time 200).
func TestStoreWrite(t *testing.T) {
	tamper := func(t *testing.T, f *storeFixture) {
		r := f.stored(t)
		r.Summary.Pass = 99
		if err := f.c.Update(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// stored: a report of run "old", allowed, is there when the scope
		// is listed; afterListing changes the store before the write.
		stored       bool
		afterListing func(*testing.T, *storeFixture)
		keep         bool
		allowed      bool
		want         outcome
		// wantRun and wantTime are the run and time of the stored report;
		// wantWritten says whether it was written at all.
		wantRun     string
		wantTime    int64
		wantWritten bool
	}{
		{name: "no report: created", keep: true, allowed: true,
			want: outcomeCreated, wantRun: "new", wantTime: 200, wantWritten: true},
		{name: "the same report: left alone", stored: true, keep: true, allowed: true,
			want: outcomeUnchanged, wantRun: "old", wantTime: 100},
		{name: "the same report, --keep-unchanged-reports=false: run-uid patched", stored: true, allowed: true,
			want: outcomeUnchanged, wantRun: "new", wantTime: 100, wantWritten: true},
		{name: "another result: rewritten", stored: true, keep: true, allowed: false,
			want: outcomeUpdated, wantRun: "new", wantTime: 200, wantWritten: true},
		{name: "the same report, edited since the listing: rewritten", stored: true, afterListing: tamper, allowed: true,
			want: outcomeUpdated, wantRun: "new", wantTime: 200, wantWritten: true},
		{name: "the same report, deleted since the listing: created", stored: true, allowed: true,
			afterListing: func(t *testing.T, f *storeFixture) {
				if err := f.c.Delete(context.Background(), f.stored(t)); err != nil {
					t.Fatal(err)
				}
			},
			want: outcomeCreated, wantRun: "new", wantTime: 200, wantWritten: true},
		{name: "no report, created since the listing: rewritten", keep: true, allowed: false,
			afterListing: func(t *testing.T, f *storeFixture) {
				old, _ := f.report(t, "old", 100, true)
				if err := f.c.Create(context.Background(), old); err != nil {
					t.Fatal(err)
				}
			},
			want: outcomeUpdated, wantRun: "new", wantTime: 200, wantWritten: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStoreFixture(t, interceptor.Funcs{})
			ctx := context.Background()
			if tc.stored {
				old, _ := f.report(t, "old", 100, true)
				if err := f.c.Create(ctx, old); err != nil {
					t.Fatal(err)
				}
			}
			st := &store{c: f.c, kind: f.kind, runUID: "new", pageSize: 10, keepUnchanged: tc.keep}
			existing, err := st.existing(ctx, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			before := ""
			if r := f.stored(t); r != nil {
				before = r.ResourceVersion
			}
			if tc.afterListing != nil {
				tc.afterListing(t, f)
				before = "changed"
			}
			obj, d := f.report(t, "new", 200, tc.allowed)
			prev, found := existing["uid-web"]
			got, err := st.write(ctx, obj, d, prev, found)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("outcome %s, want %s", outcomeNames[got], outcomeNames[tc.want])
			}
			r := f.stored(t)
			if r == nil {
				t.Fatal("no report stored")
			}
			if run := r.Labels[LabelRunUID]; run != tc.wantRun {
				t.Errorf("the report names run %q, want %q", run, tc.wantRun)
			}
			if len(r.Results) != 1 || r.Results[0].Timestamp.Seconds != tc.wantTime {
				t.Errorf("results %+v, want one of time %d", r.Results, tc.wantTime)
			}
			if wantResult := map[bool]string{true: "pass", false: "fail"}[tc.allowed]; len(r.Results) == 1 && string(r.Results[0].Result) != wantResult {
				t.Errorf("result %s, want %s", r.Results[0].Result, wantResult)
			}
			if r.Summary.Pass == 99 {
				t.Error("the edited summary was kept")
			}
			if written := r.ResourceVersion != before; written != tc.wantWritten {
				t.Errorf("written: %t, want %t", written, tc.wantWritten)
			}
		})
	}
}

// TestStoreReuse keeps the report of an object that was not evaluated, as
// decideReport says before the evaluation.
func TestStoreReuse(t *testing.T) {
	for _, tc := range []struct {
		name         string
		act          reportAction
		afterListing bool // the report is edited after the listing
		wantReused   bool
		wantRun      string
	}{
		{"left alone", actionLeave, false, true, "old"},
		{"run-uid patched", actionPatchRunUID, false, true, "new"},
		{"edited since the listing: evaluated", actionPatchRunUID, true, false, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStoreFixture(t, interceptor.Funcs{})
			ctx := context.Background()
			old, _ := f.report(t, "old", 100, true)
			if err := f.c.Create(ctx, old); err != nil {
				t.Fatal(err)
			}
			st := &store{c: f.c, kind: f.kind, runUID: "new", pageSize: 10, keepUnchanged: tc.act == actionLeave}
			existing, err := st.existing(ctx, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			if tc.afterListing {
				r := f.stored(t)
				r.Summary.Pass = 99
				if err := f.c.Update(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			target := f.kind.empty(false)
			target.SetName("uid-web")
			target.SetNamespace("team-a")
			_, reused, err := st.reuse(ctx, target, existing["uid-web"], tc.act, false)
			if err != nil || reused != tc.wantReused {
				t.Errorf("reuse = %t, %v, want %t", reused, err, tc.wantReused)
			}
			if run := f.stored(t).Labels[LabelRunUID]; run != tc.wantRun {
				t.Errorf("the report names run %q, want %q", run, tc.wantRun)
			}
		})
	}
}

// An API error other than a conflict or a missing report is the write's
// error: the scope is incomplete and its reports are kept.
func TestStoreWriteError(t *testing.T) {
	boom := errors.New("etcd is down")
	f := newStoreFixture(t, interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return boom
		},
	})
	ctx := context.Background()
	old, _ := f.report(t, "old", 100, true)
	if err := f.c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	st := &store{c: f.c, kind: f.kind, runUID: "new", pageSize: 10}
	existing, err := st.existing(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, allowed := range []bool{true, false} { // a run-uid patch, a rewrite
		obj, d := f.report(t, "new", 200, allowed)
		if _, err := st.write(ctx, obj, d, existing["uid-web"], true); !errors.Is(err, boom) {
			t.Errorf("allowed %t: write = %v, want the patch's error", allowed, err)
		}
	}
}

// deleteStale deletes the reports the run did not write, unless they were
// written since the listing.
func TestStoreDeleteStale(t *testing.T) {
	f := newStoreFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	old, _ := f.report(t, "old", 100, true)
	if err := f.c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	st := &store{c: f.c, kind: f.kind, runUID: "new", pageSize: 10, keepUnchanged: true}
	existing, err := st.existing(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	// Another run rewrote it meanwhile.
	obj, d := f.report(t, "other", 150, false)
	if _, err := st.write(ctx, obj, d, existing["uid-web"], true); err != nil {
		t.Fatal(err)
	}
	if err := st.deleteStale(ctx, "team-a", []string{"uid-web"}, existing); err != nil {
		t.Fatal(err)
	}
	if f.stored(t) == nil {
		t.Fatal("a report written since the listing was deleted")
	}
	existing, err = st.existing(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.deleteStale(ctx, "team-a", []string{"uid-web"}, existing); err != nil {
		t.Fatal(err)
	}
	if f.stored(t) != nil {
		t.Error("the stale report was kept")
	}
}
