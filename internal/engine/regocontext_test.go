package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

func ingressRequest(namespace, name string, hosts ...string) evalInput {
	obj := ingress(namespace, name, hosts...)
	return evalInput{request: []byte(fmt.Sprintf(`{"uid":"u1","kind":{"group":"networking.k8s.io","version":"v1","kind":"Ingress"},`+
		`"operation":"CREATE","namespace":%q,"name":%q,"object":%s}`, namespace, name, obj)), settings: []byte("{}")}
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
		newRegoContext(granted, hostcap.NewHost(rec), logger), 2, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close(context.Background()) })
	return r, rec, logs
}

// verdict is an evaluation and the answer it should get.
type verdict struct {
	name    string
	in      evalInput
	allowed bool
	message string
}

func checkVerdicts(t *testing.T, r runner, verdicts []verdict) {
	t.Helper()
	for _, v := range verdicts {
		t.Run(v.name, func(t *testing.T) {
			resp := answer(context.Background(), r, v.in)
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
		{"a host another Ingress has", ingressRequest("news", "blog", "blog.example.com", "shop.example.com"), false,
			"host <shop.example.com> is taken by ingress shop/web"},
		{"its own host", ingressRequest("shop", "web", "shop.example.com"), true, ""},
		{"a free host", ingressRequest("shop", "docs", "docs.example.com"), true, ""},
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
	configMap := func(ns string) evalInput {
		return evalInput{request: []byte(fmt.Sprintf(`{"uid":"u1","kind":{"group":"","version":"v1","kind":"ConfigMap"},`+
			`"operation":"CREATE","namespace":%q,"name":"new","object":{"metadata":{"name":"new"}}}`, ns)), settings: []byte("{}")}
	}
	tests := []verdict{
		{"a namespace at its limit", configMap("team-a"), false, "namespace team-a has 2 ConfigMaps already"},
		{"a namespace under its limit", configMap("team-b"), true, ""},
		{"a frozen namespace", configMap("ice"), false, "namespace ice is frozen"},
		{"a Pod where ConfigMaps are at their limit", evalInput{request: request("CREATE", "team-a", pod("p", "{}")), settings: []byte("{}")}, true, ""},
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
			_, err := r.validate(context.Background(), nil, ingressRequest("shop", "web", "shop.example.com"))
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
			newRegoContext([]ContextAwareResource{ingressKind}, nil, slog.New(slog.DiscardHandler)), 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close(context.Background())
		_, err = r.validate(context.Background(), nil, ingressRequest("shop", "web", "shop.example.com"))
		if ce, ok := asContextError(err); !ok || ce.msg != "cannot build Rego context aware data: callback channel is not set" {
			t.Errorf("got %v", err)
		}
	})
}

// BenchmarkGatekeeperInventory evaluates the unique-host policy against an
// inventory of 1,000 Ingresses: listed (here from a replayed session),
// built and parsed into the guest at every evaluation, or kept while the
// cluster does not change, when only the guest's parse of it remains.
func BenchmarkGatekeeperInventory(b *testing.B) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = ingress(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("ingress-%04d", i), fmt.Sprintf("host-%04d.example.com", i))
	}
	session := &hostcap.Session{Exchanges: []hostcap.Exchange{listed(ingressKind, items...)}}
	for _, tracked := range []bool{false, true} {
		name := map[bool]string{false: "listed", true: "kept"}[tracked]
		b.Run(name, func(b *testing.B) {
			rt := newTestRuntime(b)
			mod, err := rt.CompileOPA(context.Background(), regoBuild(b, uniqueIngressHost))
			if err != nil {
				b.Fatal(err)
			}
			caps := &changeClock{Host: hostcap.NewHost(hostcap.NewReplayer(session, "cluster.yml", nil)), tracked: tracked}
			r, err := newRegoRunner(context.Background(), rt, mod, metadata.ModeGatekeeper, []byte("{}"),
				newRegoContext([]ContextAwareResource{ingressKind}, caps, slog.New(slog.DiscardHandler)), 2, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.close(context.Background())
			in := ingressRequest("news", "blog", "host-0500.example.com")
			for b.Loop() {
				if resp := answer(context.Background(), r, in); resp.Allowed {
					b.Fatal("accepted a taken host")
				}
			}
		})
	}
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
		newRegoContext([]ContextAwareResource{ingressKind}, clock, slog.New(slog.DiscardHandler)), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close(context.Background())
	lists := func() int { return len(rec.Session().Exchanges) }
	evaluate := func() {
		t.Helper()
		if resp := answer(context.Background(), r, ingressRequest("news", "blog", "shop.example.com")); resp.Allowed {
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
