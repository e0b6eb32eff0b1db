// Command ocm-work-agent runs Open Cluster Management's work agent
// (open-cluster-management.io/ocm/pkg/work/spoke) for one managed cluster,
// outside a cluster: it watches the ManifestWorks in the cluster's namespace
// on the hub, applies their manifests with the spoke kubeconfig, and writes
// their status and feedback back to the hub. OCM's own command (cmd/work)
// also registers the cluster, which needs a module the checksum database
// does not serve here; this one runs the work agent only, without leader
// election or a metrics server, as a test needs it.
//
//	ocm-work-agent --hub-kubeconfig hub.kubeconfig --spoke-kubeconfig spoke.kubeconfig --cluster-name edge-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/openshift/library-go/pkg/controller/controllercmd"
	"github.com/openshift/library-go/pkg/operator/events"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	ocmfeature "open-cluster-management.io/api/feature"
	commonoptions "open-cluster-management.io/ocm/pkg/common/options"
	"open-cluster-management.io/ocm/pkg/features"
	"open-cluster-management.io/ocm/pkg/work/spoke"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the agent's flags.
type options struct {
	hubKubeconfig   string
	spokeKubeconfig string
	clusterName     string
	statusInterval  time.Duration
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub, where the ManifestWorks are")
	fs.StringVar(&o.spokeKubeconfig, "spoke-kubeconfig", "", "kubeconfig of the managed cluster, where the manifests are applied")
	fs.StringVar(&o.clusterName, "cluster-name", "", "name of the managed cluster: its ManifestWorks are in the hub namespace of that name")
	fs.DurationVar(&o.statusInterval, "status-sync-interval", 10*time.Second, "how often the manifests' status and feedback are read")
}

func (o *options) validate() error {
	if o.hubKubeconfig == "" || o.spokeKubeconfig == "" || o.clusterName == "" {
		return errors.New("--hub-kubeconfig, --spoke-kubeconfig and --cluster-name are required")
	}
	return nil
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.addFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := agent(ctx, o); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// agent runs the work agent until ctx is done.
func agent(ctx context.Context, o options) error {
	if err := features.SpokeMutableFeatureGate.Add(ocmfeature.DefaultSpokeWorkFeatureGates); err != nil {
		return fmt.Errorf("registering the feature gates: %w", err)
	}
	common := commonoptions.NewAgentOptions()
	common.SpokeClusterName = o.clusterName
	common.SpokeKubeconfigFile = o.spokeKubeconfig
	if err := common.Validate(); err != nil {
		return err
	}
	work := spoke.NewWorkloadAgentOptions()
	work.WorkloadSourceDriver = "kube"
	work.WorkloadSourceConfig = o.hubKubeconfig
	work.StatusSyncInterval = o.statusInterval

	spokeConfig, err := clientcmd.BuildConfigFromFlags("", o.spokeKubeconfig)
	if err != nil {
		return fmt.Errorf("reading the spoke kubeconfig: %w", err)
	}
	controllers := &controllercmd.ControllerContext{
		KubeConfig:    spokeConfig,
		EventRecorder: events.NewLoggingEventRecorder("work-agent", clock.RealClock{}),
		Clock:         clock.RealClock{},
	}
	return spoke.NewWorkAgentConfig(common, work).RunWorkloadAgent(ctx, controllers)
}
