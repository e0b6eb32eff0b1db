package controller

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/pki"
)

// Main runs the controller command: it parses args (without the program
// name), reconciles until ctx is done, and returns the exit code. With
// "uninstall" as the first argument it runs UninstallMain instead.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "uninstall" {
		return UninstallMain(ctx, args[1:], stdout, stderr)
	}
	opts := DefaultOptions()
	if port := os.Getenv("KUBEWARDEN_POLICY_SERVER_SERVICES_METRICS_PORT"); port != "" {
		if p, err := strconv.ParseInt(port, 10, 32); err == nil {
			opts.PolicyServerMetricsPort = int32(p)
		}
	}
	cmd := cmdline.Daemon{Name: "controller", Version: "controller (Warden) " + buildinfo.String()}
	if code, done := cmd.Parse(&opts, args, stdout, stderr); done {
		return code
	}
	return cmdline.RunManager(ctx, stderr, opts.Kubeconfig, func(cfg *rest.Config, logger *slog.Logger) (cmdline.Starter, error) {
		return NewManager(cfg, opts, logger)
	})
}

// otelEnv returns the OTEL_EXPORTER_OTLP_* variables of environ (as
// os.Environ returns it), sorted: the policy servers get the controller's
// collector settings.
func otelEnv(environ []string) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "OTEL_EXPORTER_OTLP_") {
			env = append(env, corev1.EnvVar{Name: name, Value: value})
		}
	}
	slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return env
}

// Scheme returns a scheme with the Kubernetes types and Warden's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := policiesv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// readClientCA reads the CAs of --client-ca-configmap-name: under mutual
// TLS the controller's own webhooks, like the policy servers, answer only
// clients whose certificates chain to them (Kubewarden mounts the same
// ConfigMap for its webhook server). They are read once, at start.
func readClientCA(ctx context.Context, c client.Client, namespace, name string) (*x509.CertPool, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cm); err != nil {
		return nil, fmt.Errorf("reading the client CA ConfigMap %s/%s: %w", namespace, name, err)
	}
	data, ok := cm.Data[clientCAKey]
	if !ok {
		return nil, fmt.Errorf("the client CA ConfigMap %s/%s has no %s", namespace, name, clientCAKey)
	}
	certs, err := pki.ParseCertificates([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("the client CA ConfigMap %s/%s: %s: %w", namespace, name, clientCAKey, err)
	}
	pool := x509.NewCertPool()
	for _, cert := range certs {
		pool.AddCert(cert)
	}
	return pool, nil
}

// NewManager builds a controller-runtime manager with every reconciler of
// the controller registered; Start runs it.
func NewManager(cfg *rest.Config, opts Options, logger *slog.Logger) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	// The webhook certificate is issued before the caches start, so it
	// reads and writes the CA without them.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	log := logr.FromSlogHandler(logger.Handler())
	certs, err := newWebhookCertificate(direct, log.WithName("webhook-certificate"), opts.DeploymentsNamespace, opts.WebhookServiceName, opts.WebhookURL)
	if err != nil {
		return nil, err
	}
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = certs.GetCertificate }}
	if name := opts.ClientCAConfigMapName; name != "" {
		clientCAs, err := readClientCA(context.Background(), direct, opts.DeploymentsNamespace, name)
		if err != nil {
			return nil, err
		}
		tlsOpts = append(tlsOpts, func(c *tls.Config) {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
		})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Logger: log,
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:    opts.WebhookServerPort,
			TLSOpts: tlsOpts,
		}),
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        controllerLeaseName,
		LeaderElectionNamespace: opts.DeploymentsNamespace,
		// The controllers' names are fixed in this package; the check
		// only refuses a second manager in one process, which tests start.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// A policy cache's claim is read once per reconcile, to check it
		// exists: not worth watching every claim of the cluster.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.PersistentVolumeClaim{}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, err
	}
	registerWebhooks(mgr.GetWebhookServer(), mgr.GetClient(), opts.DeploymentsNamespace)
	for _, r := range []manager.Runnable{
		certs,
		&webhookConfigurations{client: direct, logger: log.WithName("webhook-configurations"),
			namespace: opts.DeploymentsNamespace, service: opts.WebhookServiceName, url: opts.WebhookURL},
		&policyMetrics{client: mgr.GetClient()},
	} {
		if err := mgr.Add(r); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	for _, kind := range policyKinds {
		if err := mgr.GetFieldIndexer().IndexField(ctx, policiesv1.NewPolicy(kind), policyServerIndex, indexPolicyServer); err != nil {
			return nil, fmt.Errorf("indexing %s: %w", kind, err)
		}
	}
	psr := &PolicyServerReconciler{
		Client:                             mgr.GetClient(),
		Scheme:                             scheme,
		Namespace:                          opts.DeploymentsNamespace,
		AlwaysAcceptOnDeploymentsNamespace: opts.AlwaysAcceptAdmissionReviewsOnDeploymentsNamespace,
		EnableMetrics:                      opts.EnableMetrics,
		MetricsPort:                        opts.PolicyServerMetricsPort,
		PolicyServerURL:                    opts.PolicyServerURL,
		Pods: PodSettings{
			EnableTracing:               opts.EnableTracing,
			OtelSidecar:                 opts.EnableOtelSidecar,
			OtelEnv:                     otelEnv(os.Environ()),
			OtelCertificateSecret:       opts.OtelCertificateSecret,
			OtelClientCertificateSecret: opts.OtelClientCertificateSecret,
			ClientCAConfigMap:           opts.ClientCAConfigMapName,
			ImagePullSecrets:            opts.ImagePullSecrets,
			HostNetwork:                 opts.HostNetwork,
		},
	}
	if err := psr.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the PolicyServer reconciler: %w", err)
	}
	if name := opts.AuditScannerClientCertSecretName; name != "" {
		acr := &AuditClientCertReconciler{
			Client:    mgr.GetClient(),
			Namespace: opts.DeploymentsNamespace,
			Secret:    types.NamespacedName{Namespace: cmp.Or(opts.AuditScannerClientCertSecretNamespace, opts.DeploymentsNamespace), Name: name},
		}
		if err := acr.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the audit scanner's client certificate: %w", err)
		}
	}
	for _, kind := range policyKinds {
		pr := &PolicyReconciler{
			Client:               mgr.GetClient(),
			Kind:                 kind,
			Namespace:            opts.DeploymentsNamespace,
			PolicyServerURL:      opts.PolicyServerURL,
			RevisionHistoryLimit: opts.RevisionHistoryLimit,
			Log:                  log.WithName(kind),
			Events:               mgr.GetEventRecorder("warden-controller"),
		}
		if err := pr.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the %s reconciler: %w", kind, err)
		}
	}
	return mgr, nil
}
