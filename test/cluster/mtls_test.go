//go:build cluster

package cluster_test

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wardenhq/warden/internal/clustertest"
	"github.com/wardenhq/warden/internal/controller"
	"github.com/wardenhq/warden/internal/pkitest"
)

// TestControllerWebhooksMutualTLS: under --client-ca-configmap-name the
// controller's own webhooks answer only clients whose certificate chains
// to the ConfigMap's CA. The API server, given such a certificate by its
// admission configuration, gets through; other clients do not.
func TestControllerWebhooksMutualTLS(t *testing.T) {
	clientCA := pkitest.NewCA(t, "webhook-clients")
	apiServerCert := clientCA.Client(t, "kube-apiserver")
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// The API server presents this certificate to every webhook ("*").
	kubeconfig := write("webhook-kubeconfig.yaml", fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate-data: %s
    client-key-data: %s
`, base64.StdEncoding.EncodeToString(apiServerCert.CertPEM), base64.StdEncoding.EncodeToString(apiServerCert.KeyPEM)))
	plugin := func(name string) string {
		return fmt.Sprintf(`- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, name, kubeconfig)
	}
	admission := write("admission.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"+
		plugin("ValidatingAdmissionWebhook")+plugin("MutatingAdmissionWebhook"))

	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl := clustertest.Start(t, clustertest.WithScheme(scheme), clustertest.WithCRDDirectory("../../config/crd/bases"),
		clustertest.WithAPIServerFlag("admission-control-config-file", admission))
	mustCreate(t, cl.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	mustCreate(t, cl.Client, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "client-ca"},
		Data: map[string]string{"client-ca.crt": string(clientCA.CertPEM)}})
	opts := controllerOptions(t)
	opts.ClientCAConfigMapName = "client-ca"
	startController(t, cl, opts) // returns once the API server gets answers through the webhooks

	post := func(certs ...tls.Certificate) error {
		// The server's certificate is not what this test checks.
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Post(opts.WebhookURL+"/validate-policies-kubewarden-io-v1-policyserver", "application/json", strings.NewReader(`{}`))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := post(); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	if err := post(pkitest.NewCA(t, "other").Client(t, "intruder").TLSCertificate(t)); err == nil {
		t.Error("a client with another CA's certificate got an answer")
	}
	if err := post(clientCA.Client(t, "operator").TLSCertificate(t)); err != nil {
		t.Errorf("a client with a certificate of the client CA: %v", err)
	}
}

// TestControllerRefusesAMissingClientCA: the controller does not start
// without the client CA it was told to require.
func TestControllerRefusesAMissingClientCA(t *testing.T) {
	cl := startCluster(t)
	mustCreate(t, cl.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wardenNamespace}})
	opts := controllerOptions(t)
	opts.ClientCAConfigMapName = "client-ca"
	_, err := controller.NewManager(cl.Config, opts, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "reading the client CA ConfigMap "+wardenNamespace+"/client-ca") {
		t.Errorf("got %v", err)
	}
}
