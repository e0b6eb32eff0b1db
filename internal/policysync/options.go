package policysync

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options configures the policy syncer. The flags are controller-runtime's
// usual ones, as the controller's.
type Options struct {
	// Kubeconfig is the hub's kubeconfig file; empty: $KUBECONFIG, then
	// the in-cluster configuration.
	Kubeconfig string
	// Namespace holds the spokes' kubeconfig Secrets and the leader Lease.
	Namespace string
	// LeaderElect makes the syncer take a Lease before syncing, so that one
	// replica works at a time.
	LeaderElect bool
	// MetricsBindAddress serves the metrics; "0" disables it.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// ResyncPeriod is how often each spoke is compared with the hub when
	// nothing changed on the hub: it repairs copies changed in the spoke
	// and refreshes the status feedback.
	ResyncPeriod time.Duration
	// SpokeTimeout bounds each request to a spoke's API server.
	SpokeTimeout time.Duration
}

// DefaultOptions returns the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		Namespace:              "kubewarden",
		MetricsBindAddress:     ":8088",
		HealthProbeBindAddress: ":8081",
		ResyncPeriod:           10 * time.Second,
		SpokeTimeout:           10 * time.Second,
	}
}

// AddFlags registers the options as flags of fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to the hub's kubeconfig file; default: $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the spokes' kubeconfig Secrets and of the leader election Lease")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Take a Lease before syncing, so that one syncer replica is active at a time")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address the metrics endpoint binds to; "0" disables it`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, `Address the health probe endpoint binds to; "0" disables it`)
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "How often each spoke is compared with the hub when nothing changed on the hub (repairs copies edited in the spoke, refreshes the status feedback)")
	fs.DurationVar(&o.SpokeTimeout, "spoke-timeout", o.SpokeTimeout, "Timeout of each request to a spoke's API server")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--resync-period %s: want a positive duration", o.ResyncPeriod))
	}
	if o.SpokeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--spoke-timeout %s: want a positive duration", o.SpokeTimeout))
	}
	return errors.Join(errs...)
}
