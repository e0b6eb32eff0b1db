package policyserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/wasm"
)

// TestStartServesWhatLoads checks the start of a replica in cluster mode
// (revisions.start, through revisions.apply) without an API server: beside
// a revision that loads, revisions whose module cannot be fetched (a
// registry that refuses connections, one that never answers) or that
// cannot be decoded are reported LoadError with their cause and left out,
// and the good one is served, under its generation and its unique name.
func TestStartServesWhatLoads(t *testing.T) {
	ctx := t.Context()
	s := revisionsTestServer(t)
	s.fetchTimeout = time.Second // the registry that never answers is given up on
	r := &revisions{s: s, logger: s.logger, replica: 2, failed: map[string]time.Time{}, aliases: map[string]string{}}

	refused := closedPort(t)
	silent := silentListener(t)
	undecodable := revision(t, "broken", "builtin://cel")
	undecodable.Spec.Data = runtime.RawExtension{Raw: []byte(`{"spec": 3}`)}
	items := []policiesv1.PolicyRevision{
		revision(t, "good", "builtin://cel"),
		revision(t, "refused", "registry://"+refused+"/policies/gone:v1"),
		revision(t, "silent", "registry://"+silent+"/policies/slow:v1"),
		undecodable,
	}
	reports := r.apply(ctx, servablesOf(items, nil), true)

	want := map[string]struct {
		status  metav1.ConditionStatus
		reason  string
		message string // a substring of the condition's message
	}{
		"clusterwide-good-1":    {metav1.ConditionTrue, reasonLoaded, "replica 2 serves the policy"},
		"clusterwide-refused-1": {metav1.ConditionFalse, reasonLoadError, "fetching registry://" + refused + "/policies/gone:v1: cannot connect to " + refused + ": connection refused"},
		"clusterwide-silent-1":  {metav1.ConditionFalse, reasonLoadError, "fetching registry://" + silent + "/policies/slow:v1: gave up after 1s"},
		"clusterwide-broken-1":  {metav1.ConditionFalse, reasonLoadError, `decoding spec in PolicyRevision "clusterwide-broken-1"`},
	}
	if len(reports) != len(want) {
		t.Errorf("%d reports, want %d", len(reports), len(want))
	}
	for _, rep := range reports {
		t.Logf("%s: %s", rep.rev.Name, rep.cond.Message)
		w, ok := want[rep.rev.Name]
		switch {
		case !ok:
			t.Errorf("report on unknown revision %s", rep.rev.Name)
		case rep.cond.Type != policiesv1.PolicyReady || rep.cond.Status != w.status || rep.cond.Reason != w.reason ||
			!strings.Contains(rep.cond.Message, w.message):
			t.Errorf("%s: %s %s %s %q, want Ready %s %s with %q", rep.rev.Name, rep.cond.Type, rep.cond.Status, rep.cond.Reason, rep.cond.Message,
				w.status, w.reason, w.message)
		}
	}

	for _, id := range []string{"clusterwide-good/1", "clusterwide-good"} {
		if allowed, message := validate(t, s.env, id, "blocked"); allowed || message != "blocked" {
			t.Errorf("%s answered allowed %v %q, want a denial by the good revision", id, allowed, message)
		}
	}
	for _, id := range []string{"clusterwide-refused/1", "clusterwide-refused", "clusterwide-silent/1"} {
		if _, err := validateErr(s.env, id); err == nil {
			t.Errorf("%s is served", id)
		}
	}
	// The failures are tried again later, not at the next sync.
	for _, id := range []string{"clusterwide-refused/1", "clusterwide-silent/1"} {
		if _, ok := r.failed[id]; !ok {
			t.Errorf("%s is not among the failed revisions to try again", id)
		}
	}
	if again := r.apply(ctx, servablesOf(items, nil), false); len(again) != 2 {
		t.Errorf("the next sync reported %d revisions, want 2 (the good one, the undecodable one)", len(again))
	}
}

// revisionsTestServer is the part of a cluster-mode Server that
// revisions.apply uses: an environment fetching through a policyfetch
// Fetcher, with native CEL.
func revisionsTestServer(t *testing.T) *Server {
	t.Helper()
	ctx := t.Context()
	logger := slog.New(slog.DiscardHandler)
	rt, err := wasm.NewRuntime(ctx, wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	fetcher, err := policyfetch.New(policyfetch.Options{StoreDir: t.TempDir(), DockerConfigPath: t.TempDir() + "/none.json"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fetcher.Close)
	metrics, err := observability.NewMetrics(ctx, observability.MetricsOptions{ServiceName: serviceName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = metrics.Shutdown(context.Background()) })
	s := &Server{logger: logger, metrics: metrics, rt: rt, fetcher: fetcher}
	s.engineOpts = engine.Options{Fetch: s.fetch, Runtime: rt, Logger: logger, CompatVersion: CompatVersion, Workers: 1}
	if s.env, err = engine.NewEnvironment(s.engineOpts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.env.Close(context.Background()) })
	return s
}

// revision returns generation 1 of ClusterAdmissionPolicy name as an
// enabled, Initialized PolicyRevision: with module builtin://cel, a CEL
// policy denying pods labelled "blocked" with the message "blocked".
func revision(t *testing.T, name, module string) policiesv1.PolicyRevision {
	t.Helper()
	p := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			Module: module,
			Settings: runtime.RawExtension{Raw: []byte(
				`{"validations":[{"expression":"!has(object.metadata.labels) || !('blocked' in object.metadata.labels)","message":"blocked"}]}`)},
		}},
	}
	data, err := policiesv1.NewPolicyRevisionData(p)
	if err != nil {
		t.Fatal(err)
	}
	return policiesv1.PolicyRevision{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", p.GetUniqueName(), 1)},
		Spec: policiesv1.PolicyRevisionSpec{
			ObjectReference: policiesv1.NewPolicyReference(p), PolicyGeneration: 1, Enabled: true, Data: data,
		},
		Status: policiesv1.PolicyRevisionStatus{Conditions: []policiesv1.PolicyStatusCondition{
			{Type: policiesv1.PolicyInitialized, Status: metav1.ConditionTrue, Reason: reasonInitialized},
		}},
	}
}

// validate evaluates a pod labelled label under policy id.
func validate(t *testing.T, env *engine.Environment, id, label string) (allowed bool, message string) {
	t.Helper()
	resp, err := validateLabelled(env, id, label)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if resp.Status != nil {
		message = resp.Status.Message
	}
	return resp.Allowed, message
}

func validateErr(env *engine.Environment, id string) (*admission.Response, error) {
	return validateLabelled(env, id, "")
}

func validateLabelled(env *engine.Environment, id, label string) (*admission.Response, error) {
	var opts []admissiontest.Option
	if label != "" {
		opts = append(opts, admissiontest.WithLabels(map[string]string{label: "yes"}))
	}
	req, err := admission.DecodeReview(admissiontest.New(opts...).JSON())
	if err != nil {
		return nil, err
	}
	defer req.Release()
	return env.Validate(context.Background(), id, req, engine.OriginValidate)
}

// closedPort returns 127.0.0.1:port where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentListener returns 127.0.0.1:port where connections are accepted and
// never answered, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return l.Addr().String()
}
