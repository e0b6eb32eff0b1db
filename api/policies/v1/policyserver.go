package v1

// Defaults of the PolicyServer ports, used when the spec leaves them unset.
const (
	// DefaultWebhookPort is the port policy servers listen on for
	// admission requests.
	DefaultWebhookPort int32 = 8443
	// DefaultReadinessProbePort is the port of the policy servers'
	// readiness endpoint.
	DefaultReadinessProbePort int32 = 8081
)

// NameWithPrefix returns "policy-server-<name>", the name of the objects the
// controller creates for the PolicyServer (workload, Service, Secret,
// ConfigMap).
func (ps *PolicyServer) NameWithPrefix() string {
	return "policy-server-" + ps.Name
}

// AppLabel returns "kubewarden-policy-server-<name>", the value of the app
// label of the PolicyServer's pods.
func (ps *PolicyServer) AppLabel() string {
	return "kubewarden-" + ps.NameWithPrefix()
}

// EffectiveWebhookPort returns spec.webhookPort, or DefaultWebhookPort when
// it is unset.
func (ps *PolicyServer) EffectiveWebhookPort() int32 {
	if ps.Spec.WebhookPort != nil {
		return *ps.Spec.WebhookPort
	}
	return DefaultWebhookPort
}

// EffectiveReadinessProbePort returns spec.readinessProbePort, or
// DefaultReadinessProbePort when it is unset.
func (ps *PolicyServer) EffectiveReadinessProbePort() int32 {
	if ps.Spec.ReadinessProbePort != nil {
		return *ps.Spec.ReadinessProbePort
	}
	return DefaultReadinessProbePort
}

// EffectiveMetricsPort returns spec.metricsPort, or defaultPort (the
// controller's setting) when it is unset.
func (ps *PolicyServer) EffectiveMetricsPort(defaultPort int32) int32 {
	if ps.Spec.MetricsPort != nil {
		return *ps.Spec.MetricsPort
	}
	return defaultPort
}
