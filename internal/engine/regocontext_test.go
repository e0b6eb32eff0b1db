package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/metadata"
)

var (
	uniqueIngressHost = regoPolicy{"gatekeeper/unique_ingress_host.rego", "uniqueingresshost/violation", metadata.ModeGatekeeper}
	frozenNamespaces  = regoPolicy{"opa/frozen_namespaces.rego", "policy/main", metadata.ModeOPA}

	ingressKind   = ContextAwareResource{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}
	namespaceKind = ContextAwareResource{APIVersion: "v1", Kind: "Namespace"}
	configMapKind = ContextAwareResource{APIVersion: "v1", Kind: "ConfigMap"}
)

// listed answers a list_resources_all of kind with items (JSON objects).
func listed(r ContextAwareResource, items ...string) hostcap.Exchange {
	return hostcap.Exchange{
		Request: hostcap.KubernetesListResourceAll{APIVersion: r.APIVersion, Kind: r.Kind},
		Payload: []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":"%sList","metadata":{"resourceVersion":"7"},"items":[%s]}`,
			r.APIVersion, r.Kind, strings.Join(items, ","))),
	}
}

// plural answers the plural name of kind.
func plural(r ContextAwareResource, name string) hostcap.Exchange {
	return hostcap.Exchange{
		Request: hostcap.KubernetesGetResourcePluralName{APIVersion: r.APIVersion, Kind: r.Kind},
		Payload: []byte(`"` + name + `"`),
	}
}

func ingress(namespace, name string, hosts ...string) string {
	rules := make([]string, len(hosts))
	for i, h := range hosts {
		rules[i] = fmt.Sprintf(`{"host":%q}`, h)
	}
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q},"spec":{"rules":[%s]}}`, name, namespace, strings.Join(rules, ","))
}

// ingressReview asks to create the Ingress name in namespace with hosts.
func ingressReview(namespace, name string, hosts ...string) *admissiontest.Review {
	return admissiontest.New(admissiontest.WithKind("networking.k8s.io", "v1", "Ingress"),
		admissiontest.WithResource("networking.k8s.io", "v1", "ingresses"), admissiontest.WithNamespace(namespace),
		admissiontest.WithName(name), admissiontest.WithObject(ingress(namespace, name, hosts...)))
}

// requestOfIngress is requestOf an ingressReview.
func requestOfIngress(tb testing.TB, namespace, name string, hosts ...string) request {
	tb.Helper()
	return requestOf(tb, ingressReview(namespace, name, hosts...))
}

// contextRunner returns a runner of p whose cluster is the exchanges, the
// recorder of the requests it sends, and its logs.
func contextRunner(t *testing.T, p regoPolicy, settings string, granted []ContextAwareResource, exchanges ...hostcap.Exchange) (runner, *hostcap.Recorder, *logtest.Buffer) {
	t.Helper()
	rt := newTestRuntime(t)
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: exchanges}, "cluster.yml", nil))
	mod, err := rt.CompileOPA(context.Background(), regoBuild(t, p))
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRegoRunner(context.Background(), rt, mod, p.mode, []byte(settings),
		newRegoContext(nil, granted, p.mode, []byte(settings), hostcap.NewHost(rec), logger), 2, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close(context.Background()) })
	return r, rec, logs
}

// verdict is an evaluation (settings {}) and the answer it should get.
type verdict struct {
	name    string
	review  *admissiontest.Review
	allowed bool
	message string
}

func checkVerdicts(t *testing.T, r runner, verdicts []verdict) {
	t.Helper()
	for _, v := range verdicts {
		t.Run(v.name, func(t *testing.T) {
			resp := answer(context.Background(), r, requestOf(t, v.review), json.RawMessage("{}"))
			var msg string
			if resp.Status != nil {
				msg = resp.Status.Message
			}
			if resp.Allowed != v.allowed || msg != v.message {
				t.Errorf("got allowed %v %q, want %v %q", resp.Allowed, msg, v.allowed, v.message)
			}
		})
	}
}

func TestGatekeeperInventory(t *testing.T) {
	r, rec, _ := contextRunner(t, uniqueIngressHost, "{}", []ContextAwareResource{ingressKind},
		listed(ingressKind, ingress("shop", "web", "shop.example.com"), ingress("shop", "api", "api.example.com")))
	tests := []verdict{
		{"a host another Ingress has", ingressReview("news", "blog", "blog.example.com", "shop.example.com"), false,
			"host <shop.example.com> is taken by ingress shop/web"},
		{"its own host", ingressReview("shop", "web", "shop.example.com"), true, ""},
		{"a free host", ingressReview("shop", "docs", "docs.example.com"), true, ""},
	}
	checkVerdicts(t, r, tests)
	// Every evaluation lists the Ingresses afresh: no stale inventory.
	if got := len(rec.Session().Exchanges); got != len(tests) {
		t.Errorf("%d lists for %d evaluations", got, len(tests))
	}
}

func TestOPAKubernetesData(t *testing.T) {
	granted := []ContextAwareResource{namespaceKind, configMapKind}
	r, rec, logs := contextRunner(t, frozenNamespaces, `{"max_configmaps":2,"kubernetes":"overwritten"}`, granted,
		listed(configMapKind, `{"metadata":{"name":"a","namespace":"team-a"}}`, `{"metadata":{"name":"b","namespace":"team-a"}}`,
			`{"metadata":{"name":"c","namespace":"team-b"}}`),
		listed(namespaceKind, `{"metadata":{"name":"ice","labels":{"frozen":"true"}}}`, `{"metadata":{"name":"team-a"}}`),
		plural(configMapKind, "configmaps"), plural(namespaceKind, "namespaces"))
	configMap := func(ns string) *admissiontest.Review {
		return admissiontest.New(admissiontest.WithKind("", "v1", "ConfigMap"), admissiontest.WithResource("", "v1", "configmaps"),
			admissiontest.WithNamespace(ns), admissiontest.WithName("new"), admissiontest.WithObject(`{"metadata":{"name":"new"}}`))
	}
	tests := []verdict{
		{"a namespace at its limit", configMap("team-a"), false, "namespace team-a has 2 ConfigMaps already"},
		{"a namespace under its limit", configMap("team-b"), true, ""},
		{"a frozen namespace", configMap("ice"), false, "namespace ice is frozen"},
		{"a Pod where ConfigMaps are at their limit", admissiontest.New(admissiontest.WithNamespace("team-a"), admissiontest.WithName("p"),
			admissiontest.WithObject(pod("p", "{}"))), true, ""},
	}
	checkVerdicts(t, r, tests)
	// Kubewarden's order: the lists, then the plural names, each by
	// apiVersion and kind.
	var asked []string
	for _, ex := range rec.Session().Exchanges[:4] {
		asked = append(asked, hostcap.String(ex.Request))
	}
	want := []string{
		"!KubernetesListResourceAll {api_version: v1, kind: ConfigMap, label_selector: null, field_selector: null, field_masks: null}",
		"!KubernetesListResourceAll {api_version: v1, kind: Namespace, label_selector: null, field_selector: null, field_masks: null}",
		"!KubernetesGetResourcePluralName {api_version: v1, kind: ConfigMap}",
		"!KubernetesGetResourcePluralName {api_version: v1, kind: Namespace}",
	}
	if !slices.Equal(asked, want) {
		t.Errorf("requests of one evaluation:\n%s\nwant\n%s", strings.Join(asked, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(logs.String(), "user provided setting with key `kubernetes`") {
		t.Errorf("no warning about the kubernetes setting; logs:\n%s", logs.String())
	}
}

// TestRegoContextErrors checks that a context that cannot be built fails
// the evaluation with Kubewarden's message.
func TestRegoContextErrors(t *testing.T) {
	failed := listed(ingressKind)
	failed.Payload, failed.Failed, failed.Error = nil, true, "the API server is down"
	garbage := listed(ingressKind)
	garbage.Payload = []byte("<html>")
	tests := []struct {
		name      string
		p         regoPolicy
		granted   []ContextAwareResource
		exchanges []hostcap.Exchange
		want      string
	}{
		{"the cluster answers an error", uniqueIngressHost, []ContextAwareResource{ingressKind}, []hostcap.Exchange{failed},
			"cannot perform a request via callback channel: the API server is down"},
		{"the session lacks the list", uniqueIngressHost, []ContextAwareResource{ingressKind}, nil,
			"cannot perform a request via callback channel: replaying the host capabilities session cluster.yml: it has no recorded answer for !KubernetesListResourceAll"},
		{"the list is not JSON", uniqueIngressHost, []ContextAwareResource{ingressKind}, []hostcap.Exchange{garbage},
			"cannot convert callback response into a list of kubernetes objects: "},
		{"an object without a name", uniqueIngressHost, []ContextAwareResource{ingressKind},
			[]hostcap.Exchange{listed(ingressKind, `{"metadata":{"namespace":"shop"}}`)}, "DynamicObject does not have a name"},
		{"a plural name that is not a string", frozenNamespaces, []ContextAwareResource{namespaceKind},
			[]hostcap.Exchange{listed(namespaceKind), {Request: hostcap.KubernetesGetResourcePluralName{APIVersion: "v1", Kind: "Namespace"}, Payload: []byte("7")}},
			"get plural name failure, cannot convert callback response: "},
		{"two kinds of different scopes under one plural", frozenNamespaces, []ContextAwareResource{namespaceKind, configMapKind},
			[]hostcap.Exchange{
				listed(configMapKind, `{"metadata":{"name":"a","namespace":"team-a"}}`), listed(namespaceKind, `{"metadata":{"name":"team-a"}}`),
				plural(configMapKind, "things"), plural(namespaceKind, "things"),
			}, "trying to add a clusterwide resource to a list of namespaced resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := contextRunner(t, tt.p, `{"max_configmaps":1}`, tt.granted, tt.exchanges...)
			_, err := r.validate(context.Background(), nil, requestOfIngress(t, "shop", "web", "shop.example.com"), json.RawMessage("{}"))
			ce, ok := asContextError(err)
			if !ok || !strings.HasPrefix(ce.msg, tt.want) {
				t.Errorf("got %v, want a context error starting %q", err, tt.want)
			}
		})
	}
	t.Run("no way to read the cluster", func(t *testing.T) {
		rt := newTestRuntime(t)
		mod, err := rt.CompileOPA(context.Background(), regoBuild(t, uniqueIngressHost))
		if err != nil {
			t.Fatal(err)
		}
		r, err := newRegoRunner(context.Background(), rt, mod, metadata.ModeGatekeeper, []byte("{}"),
			newRegoContext(nil, []ContextAwareResource{ingressKind}, metadata.ModeGatekeeper, []byte("{}"), nil, slog.New(slog.DiscardHandler)), 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close(context.Background())
		_, err = r.validate(context.Background(), nil, requestOfIngress(t, "shop", "web", "shop.example.com"), json.RawMessage("{}"))
		if ce, ok := asContextError(err); !ok || ce.msg != "cannot build Rego context aware data: callback channel is not set" {
			t.Errorf("got %v", err)
		}
	})
}

// changeClock stands in for the reflectors' change tracking, which needs a
// cluster (test/cluster covers it): the kinds changed when it says.
type changeClock struct {
	*hostcap.Host
	mu      sync.Mutex
	changed time.Time
	tracked bool
}

func (c *changeClock) ListsChangedSince(_, _ string, since time.Time) (bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed.After(since), c.tracked
}

func (c *changeClock) change() {
	c.mu.Lock()
	c.changed = time.Now()
	c.mu.Unlock()
}

// TestRegoContextKeptUntilChange: the data is built once and kept while
// the reader tells nothing changed; a change, or a reader that cannot tell,
// lists again.
func TestRegoContextKeptUntilChange(t *testing.T) {
	rt := newTestRuntime(t)
	mod, err := rt.CompileOPA(context.Background(), regoBuild(t, uniqueIngressHost))
	if err != nil {
		t.Fatal(err)
	}
	rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: []hostcap.Exchange{
		listed(ingressKind, ingress("shop", "web", "shop.example.com")),
	}}, "cluster.yml", nil))
	clock := &changeClock{Host: hostcap.NewHost(rec), tracked: true}
	r, err := newRegoRunner(context.Background(), rt, mod, metadata.ModeGatekeeper, []byte("{}"),
		newRegoContext(nil, []ContextAwareResource{ingressKind}, metadata.ModeGatekeeper, []byte("{}"), clock, slog.New(slog.DiscardHandler)), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close(context.Background())
	lists := func() int { return len(rec.Session().Exchanges) }
	evaluate := func() {
		t.Helper()
		if resp := answer(context.Background(), r, requestOfIngress(t, "news", "blog", "shop.example.com"), json.RawMessage("{}")); resp.Allowed {
			t.Fatal("a taken host was accepted")
		}
	}
	evaluate()
	evaluate()
	if n := lists(); n != 1 {
		t.Errorf("%d lists for two evaluations without a change, want 1", n)
	}
	clock.change()
	evaluate()
	evaluate()
	if n := lists(); n != 2 {
		t.Errorf("%d lists after a change, want 2", n)
	}
	clock.mu.Lock()
	clock.tracked = false
	clock.mu.Unlock()
	evaluate()
	if n := lists(); n != 3 {
		t.Errorf("%d lists when changes cannot be told, want 3", n)
	}
}

// dataLoads is how many data documents r's instances have parsed.
func dataLoads(r runner) int64 {
	switch r := r.(type) {
	case gatekeeperRunner:
		return r.opa.DataLoads()
	case opaRunner:
		return r.opa.DataLoads()
	}
	panic(fmt.Sprintf("%T is not a Rego runner", r))
}

// TestRegoContextVersions: the instances parse the cluster's data once per
// version of it; a new version replaces the old one, of which nothing
// remains; a list that brings the same bytes is no new version.
func TestRegoContextVersions(t *testing.T) {
	rt := newTestRuntime(t)
	mod, err := rt.CompileOPA(context.Background(), regoBuild(t, uniqueIngressHost))
	if err != nil {
		t.Fatal(err)
	}
	web := ingress("shop", "web", "shop.example.com")
	moved := ingress("shop", "web", "www.example.com")
	rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: []hostcap.Exchange{
		listed(ingressKind, web), listed(ingressKind, web), listed(ingressKind, moved),
	}}, "cluster.yml", nil))
	// A reader that cannot tell changes: every evaluation lists.
	r, err := newRegoRunner(context.Background(), rt, mod, metadata.ModeGatekeeper, []byte("{}"),
		newRegoContext(nil, []ContextAwareResource{ingressKind}, metadata.ModeGatekeeper, []byte("{}"), hostcap.NewHost(rec), slog.New(slog.DiscardHandler)), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close(context.Background())
	loads := dataLoads(r) // NewOPA's
	steps := []struct {
		name  string
		host  string
		taken bool
		loads int64 // data loads since NewOPA's
	}{
		{"first version", "shop.example.com", true, 1},
		{"the same bytes listed again", "shop.example.com", true, 1},
		{"a new version: the old host is free", "shop.example.com", false, 2},
	}
	for _, s := range steps {
		resp := answer(context.Background(), r, requestOfIngress(t, "news", "blog", s.host), json.RawMessage("{}"))
		if resp.Allowed == s.taken {
			t.Errorf("%s: %s allowed %v, want %v", s.name, s.host, resp.Allowed, !s.taken)
		}
		if n := dataLoads(r) - loads; n != s.loads {
			t.Errorf("%s: %d data loads, want %d", s.name, n, s.loads)
		}
	}
}

// TestRegoInventoriesShared: the policies granted the same kinds in the same
// mode share one inventory, listed once per change for all of them, each
// with its own settings in opa mode; it is freed with the last of them.
func TestRegoInventoriesShared(t *testing.T) {
	rt := newTestRuntime(t)
	rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: []hostcap.Exchange{
		listed(configMapKind, `{"metadata":{"name":"a","namespace":"team-a"}}`, `{"metadata":{"name":"b","namespace":"team-a"}}`),
		listed(namespaceKind, `{"metadata":{"name":"team-a"}}`),
		plural(configMapKind, "configmaps"), plural(namespaceKind, "namespaces"),
		listed(ingressKind, ingress("shop", "web", "shop.example.com")),
	}}, "cluster.yml", nil))
	clock := &changeClock{Host: hostcap.NewHost(rec), tracked: true}
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	var shared regoInventories
	newRunner := func(p regoPolicy, settings string, granted ...ContextAwareResource) runner {
		t.Helper()
		mod, err := rt.CompileOPA(context.Background(), regoBuild(t, p))
		if err != nil {
			t.Fatal(err)
		}
		r, err := newRegoRunner(context.Background(), rt, mod, p.mode, []byte(settings),
			newRegoContext(&shared, granted, p.mode, []byte(settings), clock, logger), 2, logger)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Two opa policies over ConfigMaps and Namespaces, granted in different
	// orders, with different limits; two Gatekeeper policies over Ingresses.
	limit2 := newRunner(frozenNamespaces, `{"max_configmaps":2,"kubernetes":"overwritten"}`, namespaceKind, configMapKind)
	limit3 := newRunner(frozenNamespaces, `{"max_configmaps":3}`, configMapKind, namespaceKind)
	hosts1 := newRunner(uniqueIngressHost, "{}", ingressKind)
	hosts2 := newRunner(uniqueIngressHost, "{}", ingressKind)
	if n := len(shared.byKey); n != 2 {
		t.Errorf("%d inventories for two sets of kinds, want 2", n)
	}
	configMap := admissiontest.New(admissiontest.WithKind("", "v1", "ConfigMap"), admissiontest.WithResource("", "v1", "configmaps"),
		admissiontest.WithNamespace("team-a"), admissiontest.WithName("new"), admissiontest.WithObject(`{"metadata":{"name":"new"}}`))
	for range 2 {
		checkVerdicts(t, limit2, []verdict{{"limit 2", configMap, false, "namespace team-a has 2 ConfigMaps already"}})
		checkVerdicts(t, limit3, []verdict{{"limit 3", configMap, true, ""}})
		for _, r := range []runner{hosts1, hosts2} {
			checkVerdicts(t, r, []verdict{{"a taken host", ingressReview("news", "blog", "shop.example.com"), false,
				"host <shop.example.com> is taken by ingress shop/web"}})
		}
	}
	// One build of each inventory: two lists and two plural names, one list.
	if n := len(rec.Session().Exchanges); n != 5 {
		t.Errorf("%d requests to the cluster for four policies evaluated twice, want 5", n)
	}
	if got := strings.Count(logs.String(), "user provided setting with key `kubernetes`"); got != 1 {
		t.Errorf("%d warnings about the kubernetes setting, want 1 (limit2's, once per version); logs:\n%s", got, logs.String())
	}
	// Evaluations that find the inventory stale at once share one build.
	clock.change()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := []runner{hosts1, hosts2}[i%2]
			if resp := answer(context.Background(), r, requestOfIngress(t, "news", "blog", "shop.example.com"), json.RawMessage("{}")); resp.Allowed {
				t.Error("a taken host was accepted after a change")
			}
		})
	}
	wg.Wait()
	if n := len(rec.Session().Exchanges); n != 6 {
		t.Errorf("%d requests to the cluster after a change, want 6: one more list for both Gatekeeper policies", n)
	}
	for _, r := range []runner{limit2, limit3, hosts1, hosts2} {
		r.close(context.Background())
	}
	if n := len(shared.byKey); n != 0 {
		t.Errorf("%d inventories once every policy is closed, want 0", n)
	}
}

// TestInventoryJSON checks that the data assembled from the objects' bytes
// is what json.Marshal of the nested maps gives, byte for byte, when the
// objects are compact: keys sorted, the last of two objects of one name
// winning.
func TestInventoryJSON(t *testing.T) {
	str := func(s string) *string { return &s }
	obj := func(ns *string, name, body string) object {
		return object{name: str(name), namespace: ns, raw: json.RawMessage(body)}
	}
	team, ops := str("team-b"), str("ops")
	resources := []ContextAwareResource{namespaceKind, {APIVersion: "v1", Kind: "Secret"}, configMapKind}
	lists := [][]object{
		{obj(nil, "zeta", `{"n":1}`), obj(nil, "alpha", `{"n":2}`), obj(nil, `we"ird\name`, `{"n":3}`)},
		{obj(team, "s", `{"s":1}`)},
		{obj(team, "b", `{"c":1}`), obj(ops, "a", `{"c":2}`), obj(team, "a", `{"c":3}`), obj(team, "b", `{"c":4}`)},
	}
	type byName map[string]json.RawMessage
	wantGatekeeper, _ := json.Marshal(map[string]any{"inventory": map[string]any{
		"cluster": map[string]map[string]byName{"v1": {"Namespace": {"zeta": lists[0][0].raw, "alpha": lists[0][1].raw, `we"ird\name`: lists[0][2].raw}}},
		"namespace": map[string]map[string]map[string]byName{
			"team-b": {"v1": {"Secret": {"s": lists[1][0].raw}, "ConfigMap": {"a": lists[2][2].raw, "b": lists[2][3].raw}}},
			"ops":    {"v1": {"ConfigMap": {"a": lists[2][1].raw}}},
		},
	}})
	if got := gatekeeperData(resources, lists); string(got) != string(wantGatekeeper) {
		t.Errorf("gatekeeper data:\n%s\nwant\n%s", got, wantGatekeeper)
	}
	if got, want := gatekeeperData(resources, make([][]object, 3)), `{"inventory":{"cluster":{},"namespace":{}}}`; string(got) != want {
		t.Errorf("empty gatekeeper data: %s, want %s", got, want)
	}

	wantOPA, _ := json.Marshal(map[string]any{
		"namespaces": byName{"zeta": lists[0][0].raw, "alpha": lists[0][1].raw, `we"ird\name`: lists[0][2].raw},
		"things": map[string]byName{
			"team-b": {"s": lists[1][0].raw, "a": lists[2][2].raw, "b": lists[2][3].raw},
			"ops":    {"a": lists[2][1].raw},
		},
	})
	got, err := opaInventory([]string{"namespaces", "things", "things"}, lists)
	if err != nil || string(got) != string(wantOPA) {
		t.Errorf("opa inventory:\n%s, %v\nwant\n%s", got, err, wantOPA)
	}

	for _, tt := range []struct{ settings, want string }{
		{`null`, `{"kubernetes":{"k":1}}`},
		{`{"z":[1,2],"kubernetes":"x","a":{"b":true}}`, `{"a":{"b":true},"kubernetes":{"k":1},"z":[1,2]}`},
	} {
		got, overwritten, err := opaData(json.RawMessage(tt.settings), []byte(`{"k":1}`))
		if err != nil || string(got) != tt.want || overwritten != strings.Contains(tt.settings, "kubernetes") {
			t.Errorf("opa data of %s: %s, %v, %v; want %s", tt.settings, got, overwritten, err, tt.want)
		}
	}
	if _, _, err := opaData(json.RawMessage(`[1]`), []byte(`{}`)); err == nil {
		t.Error("opa data of settings that are not an object: no error")
	}
}

// TestEnvironmentSharesInventories: the Rego policies of an Environment
// granted the same kinds share one inventory, which goes with the last of
// them.
func TestEnvironmentSharesInventories(t *testing.T) {
	rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: []hostcap.Exchange{
		listed(ingressKind, ingress("shop", "web", "shop.example.com")),
	}}, "cluster.yml", nil))
	f := newEnvFixture(t, &changeClock{Host: hostcap.NewHost(rec), tracked: true})
	mod, err := metadata.Embed(regoBuild(t, uniqueIngressHost), &metadata.Metadata{ExecutionMode: metadata.ModeGatekeeper, ProtocolVersion: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "hosts.wasm"), mod, 0o600); err != nil {
		t.Fatal(err)
	}
	const policy = "{module: file://{dir}/hosts.wasm, contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]}"
	if err := f.env.Init(context.Background(), f.configs("a: "+policy+"\nb: "+policy+"\n")); err != nil {
		t.Fatal(err)
	}
	review := ingressReview("news", "blog", "shop.example.com")
	for _, id := range []string{"a", "b", "a"} {
		resp, err := f.env.Validate(context.Background(), id, review.Decode(t), OriginValidate)
		if err != nil || resp.Allowed {
			t.Fatalf("policy %s: %+v, %v; want a rejection", id, resp, err)
		}
	}
	if n := len(rec.Session().Exchanges); n != 1 {
		t.Errorf("%d lists for two policies, want 1", n)
	}
	f.env.Apply(context.Background(), map[string]*PolicyConfig{})
	f.env.inventories.mu.Lock()
	n := len(f.env.inventories.byKey)
	f.env.inventories.mu.Unlock()
	if n != 0 {
		t.Errorf("%d inventories once the policies are removed, want 0", n)
	}
}
