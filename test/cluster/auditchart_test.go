//go:build cluster

package cluster_test

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/auditscanner"
	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/pki"
	"github.com/wardenhq/warden/internal/pkitest"
	"github.com/wardenhq/warden/internal/testkit"
)

// auditClientSecret is the Secret the controller keeps the audit scanner's
// client certificate in by default, the one the chart's CronJob mounts.
const auditClientSecret = "kubewarden-audit-scanner-client-cert"

// TestAuditScannerClientCertificate runs the audit scanner the way the
// chart's CronJob does, against policy servers run from the StatefulSet the
// controller writes, with mutual TLS on (--client-ca-configmap-name): the
// controller issues the scanner's client certificate into a Secret, from
// Warden's CA; the policy servers accept it on /audit, and refuse the
// scanner without it or with a certificate of another CA; the certificate
// is re-issued when the Secret is lost and when the CA is replaced, and the
// scanner gets through with the new one.
func TestAuditScannerClientCertificate(t *testing.T) {
	// The API server presents a certificate of the client CA to every
	// webhook, the controller's and the policy servers'.
	clientCA := pkitest.NewCA(t, "webhook-clients")
	scheme, err := auditscanner.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl := clustertest.Start(t, clustertest.WithScheme(scheme),
		clustertest.WithCRDDirectory("../../config/crd/bases", "../../config/crd/reports"),
		clustertest.WithAPIServerFlag("admission-control-config-file", webhookClientCertConfig(t, clientCA.Client(t, "kube-apiserver"))))
	c := cl.Client
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	mustCreate(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "client-ca"},
		Data: map[string]string{"client-ca.crt": string(clientCA.CertPEM)}})
	port := testkit.FreePort(t)
	opts := controllerOptions(t)
	opts.PolicyServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	opts.ClientCAConfigMapName = "client-ca"
	if opts.AuditScannerClientCertSecretName != auditClientSecret {
		t.Fatalf("the controller's default Secret is %q, the chart mounts %q", opts.AuditScannerClientCertSecretName, auditClientSecret)
	}
	startController(t, cl, opts)
	startPolicyServers(t, cl, port, "default")
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 1},
	})

	secret := waitAuditClientSecret(t, c, nil)
	if secret.Type != corev1.SecretTypeTLS || secret.Labels["app.kubernetes.io/part-of"] != "kubewarden" {
		t.Errorf("Secret type %q, labels %v; want %q, part-of kubewarden", secret.Type, secret.Labels, corev1.SecretTypeTLS)
	}

	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audited"}})
	audited := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "audited", Name: "good"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "audited", Name: "bad", Labels: map[string]string{"forbidden": "yes"}}},
	}
	for _, cm := range audited {
		mustCreate(t, c, cm)
	}
	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-forbidden-label"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer:    "default",
			Module:          "builtin://cel",
			Settings:        celForbiddenLabel(),
			BackgroundAudit: true,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
	mustCreate(t, c, policy)
	waitActive(t, c, policy)

	kubeconfig := writeKubeconfig(t, cl.Config)
	// The scanner's flags in the chart's CronJob, with the Secret's keys as
	// files; -u stands for the PolicyServer's Service, -n keeps the run to
	// the audited namespace.
	runs := 0
	scanner := func(files map[string]string) scan {
		// A new version of each object, so that the run evaluates it
		// again instead of reusing the previous run's results.
		runs++
		for _, cm := range audited {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"run":"%d"}}}`, runs)
			if err := c.Patch(t.Context(), cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"--kubewarden-namespace=" + wardenNamespace, "--report-kind=openreports", "-u", opts.PolicyServerURL, "-n", "audited"}
		for flag, key := range map[string]string{"--extra-ca": "ca.crt", "--client-cert": "tls.crt", "--client-key": "tls.key"} {
			if f, ok := files[key]; ok {
				args = append(args, flag+"="+f)
			}
		}
		return runAudit(t, kubeconfig, args...)
	}
	results := func() map[string]string {
		out := map[string]string{}
		for _, r := range reportsOf(t, c, "Report") {
			scope, _ := r["scope"].(map[string]any)
			for _, res := range r["results"].([]any) {
				res := res.(map[string]any)
				msg, _ := res["message"].(string)
				out[fmt.Sprint(scope["name"])] = fmt.Sprint(res["result"]) + " " + msg
			}
		}
		return out
	}
	wantPassAndFail := func(t *testing.T, s scan) {
		t.Helper()
		if s.code != 0 {
			t.Fatalf("exit %d\n%s", s.code, s.logs)
		}
		got := results()
		if got["good"] != "pass " || !strings.HasPrefix(got["bad"], "fail ") || !strings.Contains(got["bad"], "forbidden label") {
			t.Errorf("results %q, want good passing and bad failing", got)
		}
	}

	t.Run("the scanner passes mutual TLS with the Secret's certificate", func(t *testing.T) {
		wantPassAndFail(t, scanner(secretFiles(t, secret)))
	})
	t.Run("the policy servers refuse the scanner without it", func(t *testing.T) {
		files := secretFiles(t, secret)
		refused := func(t *testing.T, files map[string]string) {
			t.Helper()
			s := scanner(files)
			if s.code != 1 {
				t.Fatalf("exit %d, want 1\n%s", s.code, s.logs)
			}
			got := results()
			if len(got) != 2 {
				t.Errorf("results %q, want those of good and bad", got)
			}
			for name, res := range got {
				if !strings.HasPrefix(res, "error ") || !strings.Contains(res, "tls: certificate required") {
					t.Errorf("%s: result %q, want the policy server's TLS refusal", name, res)
				}
			}
		}
		delete(files, "tls.crt")
		delete(files, "tls.key")
		refused(t, files)
		other := pkitest.NewCA(t, "other").Client(t, "audit-scanner-client")
		files["tls.crt"], files["tls.key"] = other.WriteFiles(t, t.TempDir(), "")
		refused(t, files)
	})
	t.Run("a lost Secret is issued again", func(t *testing.T) {
		if err := c.Delete(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		secret = waitAuditClientSecret(t, c, func(s *corev1.Secret) bool { return s.UID != secret.UID })
	})
	t.Run("a new CA gets a new certificate, which the policy servers accept", func(t *testing.T) {
		var ca corev1.Secret
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: "kubewarden-ca"}, &ca); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(t.Context(), &ca); err != nil {
			t.Fatal(err)
		}
		oldCert := secret.Data["tls.crt"]
		secret = waitAuditClientSecret(t, c, func(s *corev1.Secret) bool { return !bytes.Equal(s.Data["tls.crt"], oldCert) })
		// The policy servers reload their serving certificate and the CA
		// they trust as the controller re-issues them.
		files := secretFiles(t, secret)
		eventually(t, "the scanner gets through with the new certificate", func() bool { return scanner(files).code == 0 })
		wantPassAndFail(t, scanner(files))
	})
}

// waitAuditClientSecret waits until the audit scanner's client certificate
// Secret holds a client certificate of the current CA, with its key and the
// CA bundle, and satisfies cond (when not nil), and returns it.
func waitAuditClientSecret(t *testing.T, c client.Client, cond func(*corev1.Secret) bool) *corev1.Secret {
	t.Helper()
	var secret corev1.Secret
	var problem string
	eventually(t, "the audit scanner's client certificate is issued", func() bool {
		var caSecret corev1.Secret
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: "kubewarden-ca"}, &caSecret); err != nil {
			problem = err.Error()
			return false
		}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: wardenNamespace, Name: auditClientSecret}, &secret); err != nil {
			problem = err.Error()
			return false
		}
		problem = checkAuditClientCert(&secret, &caSecret)
		return problem == "" && (cond == nil || cond(&secret))
	})
	if problem != "" {
		t.Fatal(problem)
	}
	return &secret
}

// checkAuditClientCert returns what is wrong with the client certificate in
// secret, given the CA Secret; "" when nothing is.
func checkAuditClientCert(secret, caSecret *corev1.Secret) string {
	ca, err := pki.ParseCA(caSecret.Data["ca.crt"], caSecret.Data["ca.key"])
	if err != nil {
		return "the CA: " + err.Error()
	}
	cert, err := pki.ParseCertificate(secret.Data["tls.crt"])
	if err != nil {
		return "tls.crt: " + err.Error()
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "tls.crt is not a client certificate of the CA: " + err.Error()
	}
	if cert.Subject.CommonName != "audit-scanner-client" {
		return "common name " + cert.Subject.CommonName
	}
	key, err := pki.ParseKey(secret.Data["tls.key"])
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) {
		return "tls.key is not the key of tls.crt"
	}
	want := pki.Bundle(caSecret.Data["ca.crt"], caSecret.Data["old-ca.crt"])
	if !bytes.Equal(secret.Data["ca.crt"], want) {
		return "ca.crt is not the CA bundle"
	}
	return ""
}

// secretFiles writes the keys of secret to files, as a Secret volume shows
// them: key -> path.
func secretFiles(t *testing.T, secret *corev1.Secret) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(secret.Data)) {
		path := filepath.Join(dir, key)
		if err := os.WriteFile(path, secret.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
		files[key] = path
	}
	return files
}

// celForbiddenLabel are the settings of a CEL policy rejecting objects
// labelled "forbidden".
func celForbiddenLabel() runtime.RawExtension {
	return runtime.RawExtension{Raw: []byte(`{"validations":[{"expression":"!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)","message":"forbidden label"}]}`)}
}

// webhookClientCertConfig writes an admission configuration that makes the
// API server present pair to every webhook, and returns its path.
func webhookClientCertConfig(t *testing.T, pair pkitest.Pair) string {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate-data: %s
    client-key-data: %s
`, base64.StdEncoding.EncodeToString(pair.CertPEM), base64.StdEncoding.EncodeToString(pair.KeyPEM)), 0o600); err != nil {
		t.Fatal(err)
	}
	var plugins strings.Builder
	for _, name := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&plugins, `- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, name, kubeconfig)
	}
	admission := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admission, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"+plugins.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return admission
}
