//go:build cluster

package cluster_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/testkit"
)

// The controller's own webhooks, called by the API server over TLS with the
// certificate the controller issued from Warden's CA, refuse what the CRDs'
// rules cannot check, and default what they cannot default.
func TestControllerWebhooks(t *testing.T) {
	ctx := t.Context()
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "plain"}, Type: corev1.SecretTypeOpaque})
	opts := controllerOptions(t)
	metricsPort := testkit.FreePort(t)
	opts.MetricsBindAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	opts.LeaderElect = true
	startController(t, cl, opts)

	// The webhook configurations are written by the leader: the controller
	// holds the Lease.
	var lease coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: "warden-controller"}, &lease); err != nil {
		t.Fatalf("the leader election Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the Lease has no holder: %+v", lease.Spec)
	}

	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "kubewarden-controller-validating-webhook-configuration"}, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 5 || cfg.Webhooks[0].ClientConfig.URL == nil ||
		*cfg.Webhooks[0].ClientConfig.URL != opts.WebhookURL+"/validate-policies-kubewarden-io-v1-policyserver" {
		t.Errorf("validating webhooks: %+v", cfg.Webhooks)
	}

	rules := func(groups, resources []string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: groups, APIVersions: []string{"v1"}, Resources: resources},
		}}
	}
	capg := func(name, expression string) *policiesv1.ClusterAdmissionPolicyGroup {
		return &policiesv1.ClusterAdmissionPolicyGroup{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: policiesv1.ClusterAdmissionPolicyGroupSpec{ClusterPolicyGroupSpec: policiesv1.ClusterPolicyGroupSpec{
				GroupSpec: policiesv1.GroupSpec{Rules: podCreateRules(), Expression: expression, Message: "no"},
				Policies: policiesv1.PolicyGroupMembersWithContext{
					"a": {PolicyGroupMember: policiesv1.PolicyGroupMember{Module: "builtin://cel"}},
				},
			}},
		}
	}
	ap := func(name string, r []admissionregistrationv1.RuleWithOperations) *policiesv1.AdmissionPolicy {
		return &policiesv1.AdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Spec:       policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{Module: "builtin://cel", Rules: r}},
		}
	}
	tests := []struct {
		name string
		obj  client.Object
		want []string
	}{
		{
			name: "group expression that does not parse",
			obj:  capg("unparsable", "a() &&"),
			want: []string{`admission webhook "vclusteradmissionpolicygroup.kb.io" denied the request`, `spec.expression: Invalid value: "a() &&": compilation failed`},
		},
		{
			name: "group expression naming an unknown member",
			obj:  capg("unknown-member", "a() || b()"),
			want: []string{`spec.expression: Invalid value: "a() || b()": compilation failed`},
		},
		{
			name: "namespaced policy with wildcards",
			obj:  ap("everything", rules([]string{"*"}, []string{"*"})),
			want: []string{`admission webhook "vadmissionpolicy.kb.io" denied the request`, "apiGroups cannot use wildcards when using AdmissionPolicy or AdmissionPolicyGroup"},
		},
		{
			name: "namespaced policy targeting policy reports",
			obj:  ap("reports", rules([]string{"wgpolicyk8s.io"}, []string{"policyreports"})),
			want: []string{"{APIGroup: wgpolicyk8s.io, Resource: policyreports} resources cannot be targeted by AdmissionPolicy or AdmissionPolicyGroup"},
		},
		{
			name: "match condition that does not compile",
			obj: &policiesv1.ClusterAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-condition"},
				Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
					Module: "builtin://cel", Rules: podCreateRules(),
					MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "object.nope("}},
				}},
			},
			want: []string{"spec.matchConditions[0].expression: Invalid value"},
		},
		{
			name: "image pull Secret of the wrong type",
			obj: &policiesv1.PolicyServer{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-pull-secret"},
				Spec:       policiesv1.PolicyServerSpec{Image: "x", Replicas: 1, ImagePullSecret: "plain"},
			},
			want: []string{`admission webhook "vpolicyserver.kb.io" denied the request`, `spec.imagePullSecret secret "plain" is not of type kubernetes.io/dockerconfigjson`},
		},
		{
			name: "unknown host capability",
			obj: &policiesv1.PolicyServer{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-capability"},
				Spec:       policiesv1.PolicyServerSpec{Image: "x", Replicas: 1, NamespacedPoliciesCapabilities: []string{"kubernetes/get"}},
			},
			want: []string{`unknown segment "get", valid options at this level are: can_i, get_resource, list_resources_all, list_resources_by_namespace`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			if err == nil {
				t.Fatal("the API server stored it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("create: %v\nwant it to contain %q", err, w)
				}
			}
		})
	}

	// A policy sent with an empty policyServer (which the CRD's default
	// does not replace) is stored with the default one and the finalizer.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.kubewarden.io/v1",
		"kind":       "ClusterAdmissionPolicy",
		"metadata":   map[string]any{"name": "defaulted"},
		"spec": map[string]any{
			"policyServer": "",
			"module":       "builtin://cel",
			"mutating":     false,
			"rules":        []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}}},
		},
	}}
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	if ps, _, _ := unstructured.NestedString(u.Object, "spec", "policyServer"); ps != "default" {
		t.Errorf("spec.policyServer = %q, want default", ps)
	}
	if f := u.GetFinalizers(); len(f) != 1 || f[0] != policiesv1.Finalizer {
		t.Errorf("finalizers = %v, want [%s]", f, policiesv1.Finalizer)
	}

	// kubewarden_policy_total counts it.
	want := `kubewarden_policy_total{failure_policy="",module="builtin://cel",mutating="false",name="clusterwide-defaulted",namespace="",policy_server="default",policy_status="scheduled"} 1`
	eventually(t, "kubewarden_policy_total counts the policy", func() bool {
		return strings.Contains(scrape(t, metricsPort), want)
	})
}

// scrape returns the controller's metrics.
func scrape(t *testing.T, port int) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// The controller loses the API server while it reconciles a new policy,
// and finishes once it is back. The API server cannot be restarted in
// place here (envtest gives a restarted API server new certificates and
// users), so the controller talks to it through a TCP proxy that the test
// cuts: every connection is reset and new ones are refused, as during a
// restart.
func TestControllerRecoversFromAPIServerOutage(t *testing.T) {
	ctx := t.Context()
	cl := startCluster(t)
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})

	proxy := startProxy(t, cl.Config.Host)
	viaProxy := rest.CopyConfig(cl.Config)
	viaProxy.Host = "https://" + proxy.addr
	port := testkit.FreePort(t)
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	startControllerWithConfig(t, viaProxy, opts)
	waitForControllerWebhooks(t, c)

	startPolicyServers(t, cl, port, "default")
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})
	module := "file://" + policybuild.ForTest(t, "../../examples/policies/pod-privileged")
	first := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "before-outage"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: module, Rules: podCreateRules(),
		}},
	}
	mustCreate(t, c, first)
	waitActive(t, c, first)

	second := &policiesv1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "during-outage"},
		Spec: policiesv1.AdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Module: "builtin://cel", Rules: podCreateRules(),
			Settings: runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"object.metadata.name != 'forbidden'","message":"that name is taken"}]}`)},
		}},
	}
	mustCreate(t, c, second)
	proxy.cut()
	time.Sleep(3 * time.Second)
	proxy.restore(t)

	waitActive(t, c, second)
	eventually(t, "the policy created during the outage is enforced", func() bool {
		err := c.Create(ctx, pod("default", "forbidden", false))
		return err != nil && strings.Contains(err.Error(), "that name is taken")
	})
	if got := get(t, c, first).Status.PolicyStatus; got != policiesv1.PolicyStatusActive {
		t.Errorf("the policy active before the outage is %q", got)
	}
}

// proxy forwards TCP connections to an address until cut.
type proxy struct {
	addr   string
	target string

	mu    sync.Mutex
	l     net.Listener
	conns []net.Conn
}

// startProxy listens on a free port of 127.0.0.1 and forwards to the host
// of the URL target, until the test ends.
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		t.Fatalf("the API server's address %q: %v", target, err)
	}
	p := &proxy{target: u.Host}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = l.Addr().String()
	p.serve(l)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore listens again on the same address.
func (p *proxy) restore(t *testing.T) {
	t.Helper()
	var l net.Listener
	var err error
	for range 50 {
		if l, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(l)
}
