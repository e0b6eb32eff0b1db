package wardenctl

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/testkit/ociregistry"
)

// hostCallSettings returns the settings of the host-call test policy that
// make the given calls: namespace, operation and payload (any JSON value),
// in threes.
func hostCallSettings(t testing.TB, calls ...any) string {
	t.Helper()
	var list []map[string]any
	for i := 0; i < len(calls); i += 3 {
		list = append(list, map[string]any{"namespace": calls[i], "operation": calls[i+1], "payload": calls[i+2]})
	}
	b, err := json.Marshal(map[string]any{"calls": list})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// message returns the status message of the only response of a run.
func message(t testing.TB, r result) (bool, string) {
	t.Helper()
	resps := decodeResponses(t, r.stdout)
	if len(resps) != 1 {
		t.Fatalf("%d responses, want 1\n%s", len(resps), r)
	}
	if resps[0].Status == nil {
		return resps[0].Allowed, ""
	}
	return resps[0].Allowed, resps[0].Status.Message
}

// TestRecordThenReplay records the host calls of a policy against a real
// registry, then replays the session with no registry configured: the
// answers are the same, byte for byte.
func TestRecordThenReplay(t *testing.T) {
	reg := ociregistry.Start(t)
	sources := reg.SourcesFile(t)
	e := newEnv(t)
	ref := reg.Host + "/policies/labels:v1"
	pushed := e.mustRun("push", "--sources-path", sources, policy(t, "labels"), "registry://"+ref)
	digest := regexp.MustCompile(`sha256:[0-9a-f]{64}`).FindString(pushed.stdout)
	ca := pkitest.NewCA(t, "test ca")
	leaf := ca.Server(t)
	cert := func(pem []byte) map[string]any {
		return map[string]any{"encoding": "Pem", "data": hostcap.Bytes(pem)}
	}
	settings := hostCallSettings(t,
		"oci", "v1/manifest_digest", ref,
		"crypto", "v1/is_certificate_trusted", map[string]any{"cert": cert(leaf.CertPEM), "cert_chain": []any{cert(ca.CertPEM)}, "not_after": nil},
		"net", "v1/dns_lookup_host", "localhost",
		"oci", "v1/manifest_digest", reg.Host+"/policies/labels:v9",
	)
	session := filepath.Join(t.TempDir(), "session.yml")
	req := requestFile(t, `{"app": "web"}`, false)
	policyPath := policy(t, "host-call")

	recorded := e.mustRun("run", "-r", req, "--settings-json", settings, "--sources-path", sources,
		"--record-host-capabilities-interactions", session, policyPath)
	allowed, msg := message(t, recorded)
	for _, want := range []string{
		`oci/v1/manifest_digest: {"digest":"` + digest + `"}`,
		`crypto/v1/is_certificate_trusted: {"trusted":true,"reason":""}`,
		`net/v1/dns_lookup_host: {"ips":[`,
		`oci/v1/manifest_digest failed: Callback evaluation failure: reading ` + reg.Host + `/policies/labels:v9: tag v9 not found`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("recorded run: message lacks %q:\n%s", want, msg)
		}
	}
	if allowed || digest == "" {
		t.Errorf("allowed %t with a failed call, digest %q", allowed, digest)
	}
	s, err := hostcap.LoadSession(session)
	if err != nil {
		t.Fatal(err)
	}
	var variants []string
	for _, ex := range s.Exchanges {
		variants = append(variants, ex.Request.Variant())
	}
	if got := strings.Join(variants, " "); got != "OciManifestDigest CryptoIsCertificateTrusted DNSLookupHost OciManifestDigest" || !s.Exchanges[3].Failed {
		t.Errorf("session: %s, last failed %t", got, s.Exchanges[3].Failed)
	}

	// A new home, no sources.yml: the registry cannot be reached.
	replayed := newEnv(t).mustRun("run", "-r", req, "--settings-json", settings,
		"--replay-host-capabilities-interactions", session, policyPath)
	if replayed.stdout != recorded.stdout {
		t.Errorf("replayed answer differs:\nrecorded %s\nreplayed %s", recorded.stdout, replayed.stdout)
	}

	// A benchmark replays the session for every evaluation.
	bench := newEnv(t).mustRun(append(append([]string{"bench"}, quick...), "-r", req, "--settings-json", settings,
		"--replay-host-capabilities-interactions", session, policyPath)...)
	if strings.Contains(bench.stderr, "not in the replayed session") {
		t.Errorf("bench: a request was not answered:\n%s", bench)
	}
}

// kwctlSession is a session file as kwctl writes it, by hand: among others,
// a namespace found, one not found, a list of ConfigMaps. internal/hostcap's
// tests replay it too.
var kwctlSession = filepath.Join("..", "hostcap", "testdata", "kwctl-session.yml")

// TestReplayKwctlSession replays a hand-written session in kwctl's format,
// without any cluster, with and without --allow-context-aware.
func TestReplayKwctlSession(t *testing.T) {
	session := kwctlSession
	req := requestFile(t, `{"app": "web"}`, false)
	policyPath := policy(t, "host-call")
	get := func(name string) map[string]any {
		return map[string]any{"api_version": "v1", "kind": "Namespace", "name": name, "disable_cache": false}
	}
	list := map[string]any{"api_version": "v1", "kind": "ConfigMap", "namespace": "team-a", "label_selector": "app=web"}
	tests := []struct {
		name         string
		calls        []any
		allow        bool
		allowed      bool
		message      []string
		stderr       string
		yamlResource bool
	}{
		{name: "found, not found, listed", allow: true, calls: []any{
			"kubernetes", "get_resource", get("team-a"),
			"kubernetes", "get_resource", get("team-b"),
			"kubernetes", "list_resources_by_namespace", list},
			message: []string{
				`kubernetes/get_resource: {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"owner":"alice"}}}`,
				`kubernetes/get_resource failed: Callback evaluation failure: Cannot find v1/Namespace named 'team-b' inside of namespace 'None'`,
				`kubernetes/list_resources_by_namespace: {"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {},`,
			}},
		{name: "a request the session lacks", allow: true, calls: []any{"kubernetes", "get_resource", get("team-z")},
			message: []string{"kubernetes/get_resource failed: Callback evaluation failure: replaying the host capabilities session " + session +
				": it has no recorded answer for !KubernetesGetResource {api_version: v1, kind: Namespace, name: team-z, namespace: null, disable_cache: false, field_masks: null}"},
			stderr: "host capability request not in the replayed session"},
		{name: "without --allow-context-aware", calls: []any{"kubernetes", "get_resource", get("team-a")},
			message: []string{"kubernetes/get_resource failed: Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported."},
			stderr:  "the policy reads Kubernetes resources it is not granted"},
		{name: "a kind the metadata does not list", allow: true, calls: []any{"kubernetes", "list_resources_all", map[string]any{"api_version": "v1", "kind": "Secret"}},
			message: []string{"kubernetes/list_resources_all failed: Policy has not been granted access to Kubernetes v1/Secret resources. The violation has been reported."}},
		{name: "policy resource with contextAwareResources", yamlResource: true, allowed: true, calls: []any{"kubernetes", "get_resource", get("team-a")},
			message: []string{`kubernetes/get_resource: {"apiVersion":"v1","kind":"Namespace"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			settings := hostCallSettings(t, tc.calls...)
			args := []string{"run", "-r", req, "--replay-host-capabilities-interactions", session}
			if tc.allow {
				args = append(args, "--allow-context-aware")
			}
			if tc.yamlResource {
				doc := "apiVersion: policies.kubewarden.io/v1\nkind: ClusterAdmissionPolicy\nmetadata: {name: reads-namespaces}\nspec:\n" +
					"  module: " + policyPath + "\n  rules: []\n  settings: " + settings + "\n" +
					"  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n"
				args = append(args, write(t, t.TempDir(), "policy.yaml", doc))
			} else {
				args = append(args, "--settings-json", settings, policyPath)
			}
			r := newEnv(t).mustRun(args...)
			allowed, msg := message(t, r)
			if allowed != tc.allowed {
				t.Errorf("allowed %t, want %t", allowed, tc.allowed)
			}
			lines := strings.Split(msg, "\n")
			if len(lines) != len(tc.message) {
				t.Fatalf("message:\n%s\nwant %d lines", msg, len(tc.message))
			}
			for i, want := range tc.message {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d:\n%s\nwant\n%s", i+1, lines[i], want)
				}
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, r.stderr)
			}
		})
	}
}

func TestHostCapabilityFlagErrors(t *testing.T) {
	req := requestFile(t, `{"app": "web"}`, false)
	dir := t.TempDir()
	broken := write(t, dir, "broken.yml", "- type: Exchange\n  request: \"!KubernetesDelete\\n\"\n  response: {type: Success, payload: x}\n")
	tests := []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{name: "record and replay", args: []string{"--record-host-capabilities-interactions", "a.yml", "--replay-host-capabilities-interactions", "b.yml"},
			code: 2, wantErr: "--record-host-capabilities-interactions and --replay-host-capabilities-interactions cannot be used together"},
		{name: "missing session", args: []string{"--replay-host-capabilities-interactions", filepath.Join(dir, "none.yml")},
			code: 1, wantErr: "reading the host capabilities session: open " + filepath.Join(dir, "none.yml")},
		{name: "broken session", args: []string{"--replay-host-capabilities-interactions", broken},
			code: 1, wantErr: "host capabilities session " + broken + `: exchange 1: request: unknown request "KubernetesDelete"`},
		{name: "record where it cannot be written", args: []string{"--record-host-capabilities-interactions", filepath.Join(dir, "no", "dir", "s.yml")},
			code: 1, wantErr: "writing the host capabilities session: open " + filepath.Join(dir, "no", "dir", "s.yml")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "-r", req}, tc.args...), policy(t, "host-call"))
			r := newEnv(t).run(args...)
			if r.code != tc.code {
				t.Fatalf("exit code %d, want %d\n%s", r.code, tc.code, r)
			}
			checkError(t, r, tc.wantErr)
		})
	}
}
