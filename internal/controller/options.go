package controller

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/pflag"
)

// Options configures the controller. The flag names are Kubewarden's
// controller's (docs/compatibility.md#controller-flags) where it has the same
// setting.
type Options struct {
	// Kubeconfig is the kubeconfig file to use; empty: $KUBECONFIG, then
	// ~/.kube/config, then the in-cluster configuration
	// (cmdline.LoadRESTConfig).
	Kubeconfig string
	// MetricsBindAddress serves the controller's metrics; "0" disables it.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// LeaderElect makes the controller take a Lease before reconciling, so
	// that only one of its replicas works at a time.
	LeaderElect bool
	// DeploymentsNamespace is where the policy servers run and the CA lives.
	DeploymentsNamespace string
	// AlwaysAcceptAdmissionReviewsOnDeploymentsNamespace makes the policy
	// servers accept every request about objects of DeploymentsNamespace.
	AlwaysAcceptAdmissionReviewsOnDeploymentsNamespace bool
	// EnableMetrics turns the policy servers' metrics on.
	EnableMetrics bool
	// PolicyServerMetricsPort is the Service port of the policy servers'
	// metrics when a PolicyServer sets none.
	PolicyServerMetricsPort int32
	// PolicyServerURL is a development option: the webhook configurations
	// of policies call this URL (with /validate/<policy> appended) instead
	// of the policy server's Service, and the serving certificates cover
	// its host. It lets a policy server run as a local process against an
	// API server that cannot resolve Services (a kind-less test cluster).
	// Every PolicyServer gets the same URL, so it suits one PolicyServer.
	PolicyServerURL string
	// WebhookServiceName is the Service, in DeploymentsNamespace, in front
	// of the controller's own admission webhooks: their configurations
	// point at it and their certificate is issued for it.
	WebhookServiceName string
	// WebhookServerPort is the port the controller's webhooks listen on.
	WebhookServerPort int
	// WebhookURL is a development option, like PolicyServerURL: the
	// controller's own webhook configurations call this URL (with the
	// webhook's path appended) instead of WebhookServiceName, and the
	// webhook certificate is issued for its host.
	WebhookURL string

	// EnableTracing makes the policy servers export trace spans.
	EnableTracing bool
	// EnableOtelSidecar points the policy servers' metrics and spans at
	// an OpenTelemetry collector sidecar (the OpenTelemetry operator's
	// injection annotation) instead of the controller's collector.
	EnableOtelSidecar bool
	// OtelCertificateSecret and OtelClientCertificateSecret are mounted in
	// the policy servers for a TLS collector.
	OtelCertificateSecret       string
	OtelClientCertificateSecret string
	// ClientCAConfigMapName turns on mutual TLS in the policy servers and
	// the controller's own webhook server.
	ClientCAConfigMapName string
	// ImagePullSecrets are given to every policy server pod.
	ImagePullSecrets []string
	// HostNetwork runs the policy servers in the node's network.
	HostNetwork bool
	// AuditScannerClientCertSecretName is the Secret the controller keeps
	// the audit scanner's client certificate in, issued by Warden's CA; empty
	// turns it off. AuditScannerClientCertSecretNamespace is its namespace,
	// DeploymentsNamespace when empty.
	AuditScannerClientCertSecretName      string
	AuditScannerClientCertSecretNamespace string
	// RevisionHistoryLimit is how many disabled PolicyRevisions of each
	// policy are kept for rollback.
	RevisionHistoryLimit int
}

// DefaultOptions returns the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		MetricsBindAddress:               ":8088",
		HealthProbeBindAddress:           ":8081",
		PolicyServerMetricsPort:          8080,
		WebhookServiceName:               "kubewarden-controller-webhook-service",
		WebhookServerPort:                9443,
		RevisionHistoryLimit:             10,
		AuditScannerClientCertSecretName: auditClientCertSecret,
	}
}

// AddFlags registers the options as flags of fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; default: $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address the metrics endpoint binds to; "0" disables it`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, `Address the health probe endpoint binds to; "0" disables it`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Take a Lease before reconciling, so that one controller replica is active at a time")
	fs.StringVar(&o.DeploymentsNamespace, "deployments-namespace", o.DeploymentsNamespace, "Namespace of the policy servers and of Warden's CA (required)")
	fs.BoolVar(&o.AlwaysAcceptAdmissionReviewsOnDeploymentsNamespace, "always-accept-admission-reviews-on-deployments-namespace",
		o.AlwaysAcceptAdmissionReviewsOnDeploymentsNamespace, "Make the policy servers accept every request about objects of the deployments namespace")
	fs.BoolVar(&o.EnableMetrics, "enable-metrics", o.EnableMetrics, "Turn on the policy servers' metrics, and expose them on their Services")
	fs.Int32Var(&o.PolicyServerMetricsPort, "policy-server-metrics-port", o.PolicyServerMetricsPort, "Service port of the policy servers' metrics when a PolicyServer sets none (env KUBEWARDEN_POLICY_SERVER_SERVICES_METRICS_PORT)")
	fs.StringVar(&o.WebhookServiceName, "webhook-service-name", o.WebhookServiceName,
		"Service, in the deployments namespace, in front of the controller's own admission webhooks")
	fs.IntVar(&o.WebhookServerPort, "webhook-server-port", o.WebhookServerPort, "Port the controller's own admission webhooks listen on")
	fs.StringVar(&o.WebhookURL, "dev-webhook-url", o.WebhookURL,
		"Development only: the controller's own webhooks are called at this https URL (plus their path) instead of through the webhook Service")
	fs.BoolVar(&o.EnableTracing, "enable-tracing", o.EnableTracing, "Make the policy servers export trace spans over OTLP (KUBEWARDEN_LOG_FMT=otlp)")
	fs.BoolVar(&o.EnableOtelSidecar, "enable-otel-sidecar", o.EnableOtelSidecar,
		"Send the policy servers' metrics and spans to an OpenTelemetry collector sidecar (sidecar.opentelemetry.io/inject) instead of the collector named by the controller's OTEL_EXPORTER_OTLP_* variables")
	fs.StringVar(&o.OtelCertificateSecret, "opentelemetry-certificate-secret", o.OtelCertificateSecret,
		"Secret with the OpenTelemetry collector's CA, mounted in the policy servers where OTEL_EXPORTER_OTLP_CERTIFICATE points")
	fs.StringVar(&o.OtelClientCertificateSecret, "opentelemetry-client-certificate-secret", o.OtelClientCertificateSecret,
		"Secret with the client certificate for the OpenTelemetry collector, mounted where OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE points")
	fs.StringVar(&o.ClientCAConfigMapName, "client-ca-configmap-name", o.ClientCAConfigMapName,
		"ConfigMap (key client-ca.crt) with the CA client certificates must chain to: turns on mutual TLS in the policy servers and the controller's own webhooks")
	fs.StringSliceVar(&o.ImagePullSecrets, "image-pull-secrets", o.ImagePullSecrets,
		"Comma-separated Secrets, in the deployments namespace, added as imagePullSecrets to every policy server pod")
	fs.BoolVar(&o.HostNetwork, "host-network", o.HostNetwork,
		"Run the policy servers in the node's network (only when the API server cannot reach pod IPs; it exposes the webhooks on the node)")
	fs.StringVar(&o.PolicyServerURL, "dev-policy-server-url", o.PolicyServerURL,
		"Development only: webhooks call this https URL (plus /validate/<policy>/<generation>) instead of the policy server Service")
	fs.StringVar(&o.AuditScannerClientCertSecretName, "audit-scanner-client-cert-secret-name", o.AuditScannerClientCertSecretName,
		"Secret the audit scanner's client certificate (tls.crt, tls.key) and Warden's CA bundle (ca.crt) are kept in; empty: none is issued")
	fs.StringVar(&o.AuditScannerClientCertSecretNamespace, "audit-scanner-client-cert-secret-namespace", o.AuditScannerClientCertSecretNamespace,
		"Namespace of --audit-scanner-client-cert-secret-name; default: the deployments namespace")
	fs.IntVar(&o.RevisionHistoryLimit, "revision-history-limit", o.RevisionHistoryLimit,
		"Disabled PolicyRevisions kept per policy, for rollback (kubewarden.io/rollback-to-generation)")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.DeploymentsNamespace == "" {
		errs = append(errs, errors.New("--deployments-namespace is required"))
	}
	for flag, value := range map[string]string{"--dev-policy-server-url": o.PolicyServerURL, "--dev-webhook-url": o.WebhookURL} {
		if value == "" {
			continue
		}
		if u, err := url.Parse(value); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s %q: want an https URL with a host", flag, value))
		}
	}
	if o.WebhookServerPort <= 0 || o.WebhookServerPort > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-server-port %d is not a port", o.WebhookServerPort))
	}
	if o.HostNetwork && o.EnableOtelSidecar {
		errs = append(errs, errors.New("--host-network and --enable-otel-sidecar are mutually exclusive: sidecars on the node's network would clash on their ports; use a remote collector"))
	}
	if o.WebhookServiceName == "" && o.WebhookURL == "" {
		errs = append(errs, errors.New("--webhook-service-name is required"))
	}
	if o.AuditScannerClientCertSecretName == "" && o.AuditScannerClientCertSecretNamespace != "" {
		errs = append(errs, errors.New("--audit-scanner-client-cert-secret-namespace needs --audit-scanner-client-cert-secret-name"))
	}
	if o.RevisionHistoryLimit < 0 {
		errs = append(errs, fmt.Errorf("--revision-history-limit %d is negative", o.RevisionHistoryLimit))
	}
	if o.PolicyServerMetricsPort <= 0 || o.PolicyServerMetricsPort > 65535 {
		errs = append(errs, fmt.Errorf("--policy-server-metrics-port %d is not a port", o.PolicyServerMetricsPort))
	}
	return errors.Join(errs...)
}
