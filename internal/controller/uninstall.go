package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/cmdline"
)

// Uninstall removes what Warden made in a cluster, for the chart's
// pre-delete hook (`controller uninstall`), while the controller still runs:
// Helm deletes only the objects of its templates, and left alone the rest
// outlives the release. The webhook configurations are the dangerous part:
// they fail closed, so once their Service is gone the API server refuses
// every request they match, including the ones that would remove them.
//
// The order matters. Policies go first, through their finalizers, so the
// controller removes their webhooks and revisions; then the PolicyServers,
// whose finalizers wait for those webhooks; then the controller is scaled
// to zero, because while it runs it writes its own webhook configurations,
// its CA and its Lease again; last, whatever is left is deleted by name or
// label. Objects still held by a finalizer after the grace period (a
// controller that is down or broken) have their finalizers removed: an
// uninstall that cannot finish is the outage it is there to prevent.
// The CRDs and the reports are kept (docs/uninstall.md).

// UninstallOptions configures `controller uninstall`.
type UninstallOptions struct {
	// Kubeconfig is the kubeconfig file to use; empty: $KUBECONFIG, then
	// the in-cluster configuration.
	Kubeconfig string
	// DeploymentsNamespace is where the controller and the policy servers
	// run, and where the CA and the Leases are.
	DeploymentsNamespace string
	// ControllerDeployment is the controller's Deployment, in
	// DeploymentsNamespace, scaled to zero before the controller's own
	// objects are deleted; empty: the controller is not stopped.
	ControllerDeployment string
	// AuditScannerClientCertSecretName is the Secret of the audit scanner's
	// client certificate; empty: none.
	AuditScannerClientCertSecretName string
	// GracePeriod is how long the policies and then the PolicyServers get to
	// go through their finalizers before the finalizers are removed.
	GracePeriod time.Duration
	// Timeout bounds the whole uninstall.
	Timeout time.Duration
}

// DefaultUninstallOptions returns the defaults of `controller uninstall`.
func DefaultUninstallOptions() UninstallOptions {
	return UninstallOptions{
		DeploymentsNamespace:             "kubewarden",
		AuditScannerClientCertSecretName: auditClientCertSecret,
		GracePeriod:                      60 * time.Second,
		Timeout:                          4 * time.Minute,
	}
}

// AddFlags registers the options' flags on fs.
func (o *UninstallOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file; default: $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration")
	fs.StringVar(&o.DeploymentsNamespace, "deployments-namespace", o.DeploymentsNamespace, "The namespace of the controller, the policy servers and Warden's CA")
	fs.StringVar(&o.ControllerDeployment, "controller-deployment", o.ControllerDeployment, "The controller's Deployment, scaled to zero before its own objects are deleted")
	fs.StringVar(&o.AuditScannerClientCertSecretName, "audit-scanner-client-cert-secret-name", o.AuditScannerClientCertSecretName, "The Secret of the audit scanner's client certificate")
	fs.DurationVar(&o.GracePeriod, "grace-period", o.GracePeriod, "How long policies and PolicyServers get to go through their finalizers before these are removed")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long the whole uninstall may take")
}

// Validate reports the first invalid option.
func (o *UninstallOptions) Validate() error {
	switch {
	case o.DeploymentsNamespace == "":
		return errors.New("--deployments-namespace must not be empty")
	case o.GracePeriod <= 0:
		return errors.New("--grace-period must be positive")
	case o.Timeout <= o.GracePeriod:
		return errors.New("--timeout must be longer than --grace-period")
	}
	return nil
}

// uninstallPoll is how often the uninstall looks whether what it deleted
// is gone.
const uninstallPoll = 500 * time.Millisecond

// Uninstall removes every policy, PolicyServer and PolicyRevision, and the
// objects the controller made for them and for itself, as the comment at
// the top of this file says. It returns an error when something is left.
func Uninstall(ctx context.Context, c client.Client, opts UninstallOptions, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	u := &uninstaller{c: c, opts: opts, logger: logger}

	// While the controller runs, its finalizers remove the webhooks and
	// revisions of each policy, then each PolicyServer once none of its
	// policies' webhooks is left.
	logger.Info("uninstall step", "step", "deleting the policies")
	gone, err := u.deleteAndWait(ctx, policyGVKs(), u.opts.GracePeriod)
	if err == nil && gone {
		logger.Info("uninstall step", "step", "deleting the PolicyServers")
		_, err = u.deleteAndWait(ctx, []schema.GroupVersionKind{policiesGVK(policiesv1.KindPolicyServer)}, u.opts.GracePeriod)
	}
	if err != nil {
		return err
	}

	// What is left is removed without the controller, which would write
	// its own objects again: its webhook configurations first, since they
	// fail closed and guard the finalizers that may have to be removed.
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"stopping the controller", u.stopController},
		{"deleting the webhook configurations", u.deleteWebhookConfigurations},
		{"removing what finalizers still hold", u.forceDeleteCustomResources},
		{"deleting the policy servers' objects", u.deletePolicyServerObjects},
		{"deleting the controller's Secrets and the Leases", u.deleteSecretsAndLeases},
	}
	for _, s := range steps {
		logger.Info("uninstall step", "step", s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

type uninstaller struct {
	c      client.Client
	opts   UninstallOptions
	logger *slog.Logger
}

func policiesGVK(kind string) schema.GroupVersionKind { return policiesv1.GroupVersion.WithKind(kind) }

// policyGVKs are the kinds of policies.
func policyGVKs() []schema.GroupVersionKind {
	gvks := make([]schema.GroupVersionKind, 0, len(policyKinds))
	for _, kind := range policyKinds {
		gvks = append(gvks, policiesGVK(kind))
	}
	return gvks
}

// list returns the objects of gvks, as metadata, in namespace ("": every
// namespace) that keep says to keep (nil: all). A kind the API server
// does not serve (its CRD was deleted) has none.
func (u *uninstaller) list(ctx context.Context, gvks []schema.GroupVersionKind, namespace string, keep func(*metav1.PartialObjectMetadata) bool) ([]*metav1.PartialObjectMetadata, error) {
	var objs []*metav1.PartialObjectMetadata
	for _, gvk := range gvks {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := u.c.List(ctx, l, client.InNamespace(namespace)); err != nil {
			if isMissingKind(err) {
				continue
			}
			return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range l.Items {
			o := &l.Items[i]
			o.SetGroupVersionKind(gvk)
			if keep == nil || keep(o) {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

// deleteAndWait deletes every object of gvks and waits up to grace until
// they are gone, which it reports.
func (u *uninstaller) deleteAndWait(ctx context.Context, gvks []schema.GroupVersionKind, grace time.Duration) (bool, error) {
	objs, err := u.list(ctx, gvks, "", nil)
	if err != nil {
		return false, err
	}
	if err := u.delete(ctx, objs); err != nil {
		return false, err
	}
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	left, err := u.waitGone(graceCtx, gvks)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() == nil && wait.Interrupted(err):
		if len(left) > 0 {
			u.logger.Warn("the controller did not remove them in time", "kind", left[0].Kind, "name", objectName(left[0]), "left", len(left))
		}
		return false, nil
	}
	return false, err
}

// waitGone waits until no object of gvks is left. When ctx ends first, it
// returns those it saw last. A failed list is tried again at the next poll
// (an API server may be briefly unreachable, or the client throttled); the
// last such error comes with ctx's.
func (u *uninstaller) waitGone(ctx context.Context, gvks []schema.GroupVersionKind) ([]*metav1.PartialObjectMetadata, error) {
	var left []*metav1.PartialObjectMetadata
	var listErr error
	err := wait.PollUntilContextCancel(ctx, uninstallPoll, true, func(ctx context.Context) (bool, error) {
		objs, err := u.list(ctx, gvks, "", nil)
		if err != nil {
			listErr = err
			return false, nil
		}
		left, listErr = objs, nil
		return len(objs) == 0, nil
	})
	if err != nil && listErr != nil {
		err = fmt.Errorf("%w (the last list: %w)", err, listErr)
	}
	return left, err
}

// delete deletes objs; those already gone are no error.
func (u *uninstaller) delete(ctx context.Context, objs []*metav1.PartialObjectMetadata) error {
	for _, o := range objs {
		if err := u.c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s %s: %w", o.Kind, objectName(o), err)
		}
		u.logger.Info("deleted", "kind", o.Kind, "name", objectName(o))
	}
	return nil
}

// forceDeleteCustomResources deletes the policies, PolicyServers and
// PolicyRevisions left, removing their finalizers: with the controller
// stopped, nothing else would.
func (u *uninstaller) forceDeleteCustomResources(ctx context.Context) error {
	gvks := append(policyGVKs(), policiesGVK(policiesv1.KindPolicyServer), policiesGVK(policiesv1.KindPolicyRevision))
	objs, err := u.list(ctx, gvks, "", nil)
	if err != nil {
		return err
	}
	if err := u.delete(ctx, objs); err != nil {
		return err
	}
	for _, o := range objs {
		if len(o.Finalizers) == 0 {
			continue
		}
		u.logger.Warn("removing finalizers", "kind", o.Kind, "name", objectName(o), "finalizers", o.Finalizers)
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := u.c.Patch(ctx, o, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing the finalizers of %s %s: %w", o.Kind, objectName(o), err)
		}
	}
	if left, err := u.waitGone(ctx, gvks); err != nil {
		if len(left) > 0 {
			return fmt.Errorf("%d objects remain, the first %s %s: %w", len(left), left[0].Kind, objectName(left[0]), err)
		}
		return err
	}
	return nil
}

// stopController scales the controller's Deployment to zero and waits
// until its pods are gone.
func (u *uninstaller) stopController(ctx context.Context) error {
	name := u.opts.ControllerDeployment
	if name == "" {
		return nil
	}
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: u.opts.DeploymentsNamespace, Name: name}
	if err := u.c.Get(ctx, key, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the Deployment %s: %w", key, err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
		if err := u.c.Patch(ctx, &d, patch); err != nil {
			return fmt.Errorf("scaling the Deployment %s to zero: %w", key, err)
		}
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Errorf("the selector of the Deployment %s: %w", key, err)
	}
	return u.waitNoPods(ctx, client.MatchingLabelsSelector{Selector: selector}, "the controller's pods are gone")
}

// waitNoPods waits until no pod of the deployments namespace matches
// selector.
func (u *uninstaller) waitNoPods(ctx context.Context, selector client.ListOption, what string) error {
	err := wait.PollUntilContextCancel(ctx, uninstallPoll, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := u.c.List(ctx, &pods, client.InNamespace(u.opts.DeploymentsNamespace), selector); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting until %s: %w", what, err)
	}
	return nil
}

// deleteWebhookConfigurations deletes the controller's webhook
// configurations and those of policies that its finalizers did not get to:
// every one labelled as Warden's, and the controller's by name too.
func (u *uninstaller) deleteWebhookConfigurations(ctx context.Context) error {
	gvks := []schema.GroupVersionKind{
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"),
	}
	objs, err := u.list(ctx, gvks, "", func(o *metav1.PartialObjectMetadata) bool {
		return o.Labels[partOfLabel] == partOf || o.Name == validatingConfigName || o.Name == mutatingConfigName
	})
	if err != nil {
		return err
	}
	return u.delete(ctx, objs)
}

// deletePolicyServerObjects deletes what the controller made for the
// PolicyServers, which they own: the garbage collector would remove it too,
// but the uninstall does not count on it. Then it waits until the policy
// servers' pods are gone, so that none of them takes its Lease again.
func (u *uninstaller) deletePolicyServerObjects(ctx context.Context) error {
	gvks := []schema.GroupVersionKind{
		appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
		corev1.SchemeGroupVersion.WithKind("Service"),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
		policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	}
	objs, err := u.list(ctx, gvks, u.opts.DeploymentsNamespace, ownedByPolicyServer)
	if err != nil {
		return err
	}
	if err := u.delete(ctx, objs); err != nil {
		return err
	}
	return u.waitNoPods(ctx, client.MatchingLabels{
		partOfLabel:                   partOf,
		"app.kubernetes.io/component": "policy-server",
	}, "the policy servers' pods are gone")
}

// ownedByPolicyServer reports whether a PolicyServer owns o.
func ownedByPolicyServer(o *metav1.PartialObjectMetadata) bool {
	for _, ref := range o.OwnerReferences {
		if ref.Kind == policiesv1.KindPolicyServer && strings.HasPrefix(ref.APIVersion, policiesv1.GroupName+"/") {
			return true
		}
	}
	return false
}

// deleteSecretsAndLeases deletes the CA and the audit scanner's client
// certificate, and the Leases of the controller and the policy servers.
func (u *uninstaller) deleteSecretsAndLeases(ctx context.Context) error {
	ns := u.opts.DeploymentsNamespace
	secrets := []string{caSecretName}
	if name := u.opts.AuditScannerClientCertSecretName; name != "" {
		secrets = append(secrets, name)
	}
	objs, err := u.list(ctx, []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Secret")}, ns, func(o *metav1.PartialObjectMetadata) bool {
		return slices.Contains(secrets, o.Name)
	})
	if err != nil {
		return err
	}
	leases, err := u.list(ctx, []schema.GroupVersionKind{coordinationv1.SchemeGroupVersion.WithKind("Lease")}, ns, func(o *metav1.PartialObjectMetadata) bool {
		return o.Name == controllerLeaseName || strings.HasPrefix(o.Name, policyServerLeasePrefix)
	})
	if err != nil {
		return err
	}
	return u.delete(ctx, append(objs, leases...))
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// isMissingKind reports whether err says the API server does not serve a
// kind: its CRD was removed already.
func isMissingKind(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// UninstallMain runs `controller uninstall`: it parses args (after
// "uninstall"), runs Uninstall, and returns the exit code.
func UninstallMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := DefaultUninstallOptions()
	if code, done := (cmdline.Daemon{Name: "controller uninstall"}).Parse(&opts, args, stdout, stderr); done {
		return code
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, err := cmdline.RESTConfig(opts.Kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	scheme, err := Scheme()
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	// Each poll lists seven kinds: client-go's default of 5 requests a
	// second would throttle the uninstall itself.
	cfg.QPS, cfg.Burst = 50, 100
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(stderr, "Error: creating a client: %v\n", err)
		return 1
	}
	if err := Uninstall(ctx, c, opts, logger); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	logger.Info("uninstalled")
	return 0
}
