package wardenctl

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/wardenhq/warden/internal/cmdline"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/verify"
)

// hostCapabilities is what answers the host calls of run and bench, as
// kwctl's callback handler does: the real world (registries, DNS,
// certificates and, when a policy may read Kubernetes resources, the
// cluster of the kubeconfig), optionally recorded to a session file, or a
// recorded session replayed.
type hostCapabilities struct {
	host *hostcap.Host

	recorder *hostcap.Recorder // set when recording
	recordTo string
	replayer *hostcap.Replayer // set when replaying
	replay   string

	closeFn func()
}

// hostCapabilities sets up the host capabilities of run and bench from
// their flags. A cluster is reached only when a policy may read Kubernetes
// resources (--allow-context-aware, or the contextAwareResources of policy
// resources) and no session is replayed; then a missing kubeconfig is an
// error, as in kwctl.
func (a *app) hostCapabilities(o *RunOptions, policies []namedPolicy) (*hostCapabilities, error) {
	if path := o.ReplayHostCapabilities; path != "" {
		s, err := hostcap.LoadSession(path)
		if err != nil {
			return nil, err
		}
		r := hostcap.NewReplayer(s, path, a.logger())
		return &hostCapabilities{host: hostcap.NewHost(r), replayer: r, replay: path, closeFn: func() {}}, nil
	}
	var kube *hostcap.Kubernetes
	if readsKubernetes(o, policies) {
		cfg, err := cmdline.LoadRESTConfig("", a.getenv)
		if err != nil {
			return nil, fmt.Errorf("the policy may read Kubernetes resources: %w (to run it without a cluster, replay a session with --replay-host-capabilities-interactions)", err)
		}
		if kube, err = hostcap.NewKubernetes(cfg, hostcap.KubernetesOptions{}); err != nil {
			return nil, err
		}
	}
	d, closeFn, err := a.directHostCapabilities(o.Remote, kube)
	if err != nil {
		return nil, err
	}
	h := &hostCapabilities{host: hostcap.NewHost(d), closeFn: closeFn}
	if path := o.RecordHostCapabilities; path != "" {
		h.recorder, h.recordTo = hostcap.NewRecorder(d), path
		h.host = hostcap.NewHost(h.recorder)
	}
	return h, nil
}

// readsKubernetes tells whether any policy may read Kubernetes resources.
func readsKubernetes(o *RunOptions, policies []namedPolicy) bool {
	if o.AllowContextAware {
		return true
	}
	for _, p := range policies {
		if len(p.Config.ContextAwareResources) > 0 {
			return true
		}
		for _, m := range p.Config.Policies {
			if len(m.ContextAwareResources) > 0 {
				return true
			}
		}
	}
	return false
}

// directHostCapabilities returns the handler that answers host calls from
// registries (under the sources and credentials of remote, never its
// signature requirements, which are for policy modules), DNS, certificates
// and kube (nil: no cluster), and the function that releases it.
func (a *app) directHostCapabilities(remote RemoteOptions, kube *hostcap.Kubernetes) (*hostcap.Direct, func(), error) {
	opts := hostcap.Options{Kubernetes: kube}
	if path := remote.Verification.TrustConfigPath; path != "" {
		trust, err := verify.LoadTrustConfig(path)
		if err != nil {
			return nil, nil, err
		}
		opts.SigstoreTrust = trust
	}
	remote.Verification = VerificationOptions{}
	f, err := a.fetcher(remote, a.storeDir())
	if err != nil {
		return nil, nil, err
	}
	opts.Registry = f
	return hostcap.NewDirect(opts), f.Close, nil
}

// close releases the connections of the host capabilities.
func (h *hostCapabilities) close() { h.closeFn() }

// finish writes the recorded session, or reports the exchanges of the
// replayed session that answered nothing.
func (h *hostCapabilities) finish(ctx context.Context, logger *slog.Logger) error {
	switch {
	case h.recorder != nil:
		s := h.recorder.Session()
		if err := s.WriteFile(h.recordTo); err != nil {
			return err
		}
		logger.InfoContext(ctx, "host capabilities session written", observability.KeyPath, h.recordTo, "exchanges", len(s.Exchanges))
	case h.replayer != nil:
		if n := h.replayer.Unreplayed(); n > 0 {
			logger.WarnContext(ctx, "exchanges of the replayed session answered no request", observability.KeyPath, h.replay, "exchanges", n)
		}
	}
	return nil
}

// warnContextAware warns about policies whose metadata lists Kubernetes
// resources they were not granted: their Kubernetes reads will be refused.
func (a *app) warnContextAware(ctx context.Context, sess *session, policies []namedPolicy) {
	warn := func(id string, granted bool) {
		p, ok := sess.eng.Policy(id)
		if granted || !ok || p.Metadata == nil || len(p.Metadata.ContextAwareResources) == 0 {
			return
		}
		a.logger().WarnContext(ctx, "the policy reads Kubernetes resources it is not granted, so those reads will fail: review them with inspect, then grant them with --allow-context-aware",
			observability.KeyPolicyID, id, "context_aware_resources", p.Metadata.ContextAwareResources)
	}
	for _, p := range policies {
		if !p.Config.IsGroup() {
			warn(p.ID, p.Config.ContextAwareFromMetadata || len(p.Config.ContextAwareResources) > 0)
			continue
		}
		for name, m := range p.Config.Policies {
			warn(p.ID+"/"+name, len(m.ContextAwareResources) > 0)
		}
	}
}
