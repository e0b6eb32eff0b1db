package policyserver_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/rego/regotest"
)

// regoModule builds a Rego policy of testdata/rego for mode and returns
// the file:// URL of the annotated module.
func regoModule(t *testing.T, file, entrypoint, mode string) string {
	t.Helper()
	return regotest.ModuleFile(t, filepath.Join("..", "..", "testdata", "rego", file), entrypoint, mode)
}

func TestRegoPolicies(t *testing.T) {
	labels := regoModule(t, "gatekeeper/required_labels.rego", "k8srequiredlabels/violation", metadata.ModeGatekeeper)
	reserved := regoModule(t, "opa/reserved_namespaces.rego", "policy/main", metadata.ModeOPA)
	policies := writePolicies(t, `
required-labels:
  module: `+labels+`
  settings: {labels: [{key: team, allowedRegex: "^[a-z]+$"}]}
reserved-namespaces:
  module: `+reserved+`
  settings: {reserved_namespaces: [kube-system]}
  message: "this namespace is off limits"
`)
	ts := startServer(t, testOptions(t, policies))

	tests := []struct {
		name, path, namespace string
		labels                map[string]string
		allowed               bool
		message               string
		code                  int32
	}{
		{"gatekeeper accepts", "/validate/required-labels", "default", map[string]string{"team": "web"}, true, "", 0},
		{"gatekeeper violation", "/validate/required-labels", "default", map[string]string{"team": "Web"}, false,
			"label <team: Web> does not match the allowed regex ^[a-z]+$", 0},
		{"opa accepts", "/validate/reserved-namespaces", "default", nil, true, "", 0},
		{"opa rejects, custom message", "/validate/reserved-namespaces", "kube-system", nil, false, "this namespace is off limits", 403},
		{"opa audit keeps the policy's message", "/audit/reserved-namespaces", "kube-system", nil, false, `namespace "kube-system" is reserved`, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.review(t, tt.path, admissiontest.New(admissiontest.WithUID("uid-7"), admissiontest.WithNamespace(tt.namespace), admissiontest.WithLabels(tt.labels)).JSON())
			var msg string
			var code int32
			if resp.Status != nil {
				msg, code = resp.Status.Message, resp.Status.Code
			}
			if resp.UID != "uid-7" || resp.Allowed != tt.allowed || msg != tt.message || code != tt.code {
				t.Errorf("got uid %q allowed %v %q (%d), want allowed %v %q (%d)", resp.UID, resp.Allowed, msg, code, tt.allowed, tt.message, tt.code)
			}
		})
	}
	t.Run("gatekeeper refuses raw requests", func(t *testing.T) {
		resp := ts.review(t, "/validate_raw/required-labels", []byte(`{"request":{"uid":"r1","user":"alice"}}`))
		if resp.Allowed || resp.Status == nil || resp.Status.Code != 500 || !strings.Contains(resp.Status.Message, "Gatekeeper does not support raw validation requests") {
			t.Errorf("got %+v %+v", resp, resp.Status)
		}
	})
}

// TestRegoContextAwareWithoutCluster: a Rego policy granted Kubernetes
// resources loads on a server without a cluster, and each evaluation fails
// with Kubewarden's message, while the other policies keep answering.
func TestRegoContextAwareWithoutCluster(t *testing.T) {
	unique := regoModule(t, "gatekeeper/unique_ingress_host.rego", "uniqueingresshost/violation", metadata.ModeGatekeeper)
	labels := regoModule(t, "gatekeeper/required_labels.rego", "k8srequiredlabels/violation", metadata.ModeGatekeeper)
	opts := testOptions(t, writePolicies(t, `
unique:
  module: `+unique+`
  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]
labels:
  module: `+labels+`
`))
	// What Main sets up when there is no kubeconfig.
	opts.HostCapabilities = hostcap.NewHost(hostcap.NewDirect(hostcap.Options{}))
	ts := startServer(t, opts)
	resp := ts.review(t, "/validate/unique", admissiontest.New(admissiontest.WithUID("uid-8")).JSON())
	if resp.Allowed || resp.Status == nil || resp.Status.Code != 500 ||
		resp.Status.Message != "cannot perform a request via callback channel: kube::Client was not initialized properly" {
		t.Errorf("got %+v %+v", resp, resp.Status)
	}
	if resp := ts.review(t, "/validate/labels", admissiontest.New(admissiontest.WithUID("uid-9")).JSON()); !resp.Allowed {
		t.Errorf("the other policy: %+v %+v", resp, resp.Status)
	}
}
