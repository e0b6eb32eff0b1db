package controller

import (
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// webhookTarget is where the API server sends a policy's requests.
type webhookTarget struct {
	namespace string // the deployments namespace
	service   string // the PolicyServer's Service (PolicyServer.NameWithPrefix)
	caBundle  []byte
	// url, for development, replaces the Service with a URL: the policy's
	// path is appended to it.
	url string
	// generation, when set, is the generation of the policy the webhook
	// calls: /validate/<unique name>/<generation> (RFC 000).
	generation int64
}

func (t webhookTarget) clientConfig(uniqueName string) admissionregistrationv1.WebhookClientConfig {
	path := "/validate/" + uniqueName
	if t.generation > 0 {
		path += "/" + strconv.FormatInt(t.generation, 10)
	}
	return clientConfig(t.url, t.namespace, t.service, path, t.caBundle)
}

// clientConfig is where the API server sends a webhook's requests, the
// policies' and the controller's own: path on port 443 of the Service
// namespace/service, or, for development, path appended to url when it is
// set. The webhook's certificate must chain to bundle.
func clientConfig(url, namespace, service, path string, bundle []byte) admissionregistrationv1.WebhookClientConfig {
	if url != "" {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(strings.TrimSuffix(url, "/") + path), CABundle: bundle}
	}
	return admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To(path), Port: ptr.To[int32](443)},
		CABundle: bundle,
	}
}

// webhookMeta sets the labels and annotations of a policy's webhook
// configuration.
func webhookMeta(m *metav1.ObjectMeta, p policiesv1.Policy) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[partOfLabel] = partOf
	m.Labels[policyServerLabel] = p.GetPolicyServer()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[policyNameAnnotation] = p.GetName()
	m.Annotations[policyNamespaceAnnotation] = p.GetNamespace()
}

// namespaceSelector is the policy's namespace selector; a cluster-wide
// policy also leaves out the deployments namespace, unless it asks not to.
func namespaceSelector(p policiesv1.Policy, deploymentsNamespace string) *metav1.LabelSelector {
	sel := p.GetNamespaceSelector()
	if p.GetNamespace() != "" || p.GetAllowInsideAdmissionControllerNamespace() {
		return sel
	}
	if sel == nil {
		sel = &metav1.LabelSelector{}
	} else {
		sel = sel.DeepCopy()
	}
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
		Key:      "kubernetes.io/metadata.name",
		Operator: metav1.LabelSelectorOpNotIn,
		Values:   []string{deploymentsNamespace},
	})
	return sel
}

func sideEffects(p policiesv1.Policy) *admissionregistrationv1.SideEffectClass {
	if s := p.GetSideEffects(); s != nil {
		return s
	}
	return ptr.To(admissionregistrationv1.SideEffectClassNone)
}

// policyWebhook is p's webhook, sending its requests to t.
func policyWebhook(p policiesv1.Policy, t webhookTarget) admissionregistrationv1.ValidatingWebhook {
	name := p.GetUniqueName()
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name + webhookSuffix,
		ClientConfig:            t.clientConfig(name),
		Rules:                   p.GetRules(),
		FailurePolicy:           p.GetFailurePolicy(),
		MatchPolicy:             p.GetMatchPolicy(),
		NamespaceSelector:       namespaceSelector(p, t.namespace),
		ObjectSelector:          p.GetObjectSelector(),
		SideEffects:             sideEffects(p),
		TimeoutSeconds:          p.GetTimeoutSeconds(),
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         p.GetMatchConditions(),
	}
}

// desiredValidatingWebhook sets cfg to send p's requests to t.
func desiredValidatingWebhook(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, p policiesv1.Policy, t webhookTarget) {
	webhookMeta(&cfg.ObjectMeta, p)
	cfg.Webhooks = []admissionregistrationv1.ValidatingWebhook{policyWebhook(p, t)}
}

// desiredMutatingWebhook sets cfg to send p's requests to t.
func desiredMutatingWebhook(cfg *admissionregistrationv1.MutatingWebhookConfiguration, p policiesv1.Policy, t webhookTarget) {
	webhookMeta(&cfg.ObjectMeta, p)
	cfg.Webhooks = []admissionregistrationv1.MutatingWebhook{asMutating(policyWebhook(p, t))}
}

// asMutating is w as a mutating webhook: the same fields, and the
// mutating-only ones (reinvocationPolicy) left to their default.
func asMutating(w admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    w.Name,
		ClientConfig:            w.ClientConfig,
		Rules:                   w.Rules,
		FailurePolicy:           w.FailurePolicy,
		MatchPolicy:             w.MatchPolicy,
		NamespaceSelector:       w.NamespaceSelector,
		ObjectSelector:          w.ObjectSelector,
		SideEffects:             w.SideEffects,
		TimeoutSeconds:          w.TimeoutSeconds,
		AdmissionReviewVersions: w.AdmissionReviewVersions,
		MatchConditions:         w.MatchConditions,
	}
}
