package policysync

import (
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/source"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// eventBuffer is how many reconcile requests the watches and workers may
// queue before they wait for the controller to take them.
const eventBuffer = 1024

// maxConcurrentReconciles is how many PolicySyncs are reconciled at once
// (one PolicySync is never reconciled twice at once): a reconcile waiting
// on the hub, to validate one PolicySync's resources, does not hold up the
// others.
const maxConcurrentReconciles = 4

// Scheme returns a scheme with the Kubernetes types, the
// CustomResourceDefinition kind and the PolicySync kind.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, syncv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewManager builds a controller-runtime manager on the hub cfg with the
// PolicySync controller registered; Start runs it.
func NewManager(cfg *rest.Config, opts Options, logger *slog.Logger) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  logr.FromSlogHandler(logger.Handler()),
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        "warden-policy-syncer",
		LeaderElectionNamespace: opts.Namespace,
		// The controller's name is fixed in this package; the check only
		// refuses a second manager in one process, which tests start.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
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

	hub, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the hub's dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the hub's client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the hub's discovery client: %w", err)
	}
	s := newSyncer(syncerDeps{client: mgr.GetClient(), reader: mgr.GetAPIReader(), hub: hub, kube: kube, discovery: disco}, opts, logger)
	if err := mgr.Add(s); err != nil {
		return nil, err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("policysync").
		For(&syncv1alpha1.PolicySync{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		WatchesRawSource(source.Channel(s.events, &handler.EnqueueRequestForObject{})).
		Complete(s)
	if err != nil {
		return nil, fmt.Errorf("setting up the PolicySync controller: %w", err)
	}
	return mgr, nil
}
