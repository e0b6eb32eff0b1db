package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/wardenhq/warden/internal/kubepolicy"
	"github.com/wardenhq/warden/internal/wasm"
)

// The module URIs of Kubernetes' own admission policies, which Warden runs
// natively with the API server's plugins (internal/kubepolicy): a
// ValidatingAdmissionPolicy or a MutatingAdmissionPolicy, its bindings and
// params in the settings (docs/kubernetes-policies.md).
const (
	NativeVAPModule = "builtin://vap"
	NativeMAPModule = "builtin://map"
)

// isKubePolicyModule reports whether uri is builtin://vap or builtin://map.
func isKubePolicyModule(uri string) bool {
	return uri == NativeVAPModule || uri == NativeMAPModule
}

// newNativeRunner builds the runner of a native module: a Kubernetes
// admission policy, or cel-policy. Its error is the verdict on invalid
// settings.
func newNativeRunner(module string, settings json.RawMessage, granted []ContextAwareResource) (runner, error) {
	if isKubePolicyModule(module) {
		return newKubePolicyRunner(module, settings, granted)
	}
	return newCELRunner(settings)
}

// kubePolicyRunner serves a kubepolicy.Policy. The policy's namespaces come
// from its settings, then, when the policy was granted v1 Namespace in
// contextAwareResources, from the kubernetes host capability (through the
// policy's gate, as a wasm policy's reads go); otherwise a namespace the
// settings lack is assumed to exist with only its name label.
type kubePolicyRunner struct {
	policy   *kubepolicy.Policy
	settings json.RawMessage
}

// hostKey carries a request's host caller to the policy's namespace reads.
type hostKey struct{}

func newKubePolicyRunner(module string, settings json.RawMessage, granted []ContextAwareResource) (runner, error) {
	var opts kubepolicy.Options
	for _, r := range granted {
		if r.APIVersion == "v1" && r.Kind == "Namespace" {
			opts.Namespace = namespaceFromHost
		}
	}
	p, err := kubepolicy.Load(settings, opts)
	if err != nil {
		return nil, err
	}
	if want := kubePolicyKind(module); !p.Is(want) {
		p.Close()
		return nil, fmt.Errorf("%s serves a %s: the settings' policy is not one", module, want)
	}
	return &kubePolicyRunner{policy: p, settings: settings}, nil
}

func kubePolicyKind(module string) string {
	if module == NativeMAPModule {
		return kubepolicy.KindMAP
	}
	return kubepolicy.KindVAP
}

// namespaceFromHost reads a namespace with kubernetes get_resource.
func namespaceFromHost(ctx context.Context, name string) (*corev1.Namespace, error) {
	host, ok := ctx.Value(hostKey{}).(wasm.HostCaller)
	if !ok {
		return nil, fmt.Errorf("reading namespace %q: no host capabilities for this evaluation", name)
	}
	payload, err := json.Marshal(map[string]any{"api_version": "v1", "kind": "Namespace", "name": name, "disable_cache": false})
	if err != nil {
		return nil, err
	}
	out, err := host.HostCall(ctx, "kubewarden", kubernetesNamespace, "get_resource", payload)
	if err != nil {
		// The kubernetes capability's wording of a missing object.
		if strings.HasPrefix(err.Error(), "Cannot find v1/Namespace named") {
			return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		}
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := json.Unmarshal(out, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %q: %w", name, err)
	}
	return ns, nil
}

// validate decodes the request body as an AdmissionRequest (a raw request
// is read as one too, as cel-policy reads it) and answers with the API
// server's verdict: its status message and code for a denial, its
// warnings and audit annotations, and the mutated object of a
// MutatingAdmissionPolicy.
func (r *kubePolicyRunner) validate(ctx context.Context, host wasm.HostCaller, req request, _ json.RawMessage) (*validationResponse, error) {
	var ar admissionv1.AdmissionRequest
	if err := json.Unmarshal(req.body, &ar); err != nil {
		return nil, fmt.Errorf("decoding the admission request: %w", err)
	}
	e, err := r.policy.Evaluate(context.WithValue(ctx, hostKey{}, host), &ar)
	if err != nil {
		return nil, err
	}
	resp := e.Response
	vr := &validationResponse{Accepted: resp.Allowed, Warnings: resp.Warnings, AuditAnnotations: resp.AuditAnnotations}
	if !resp.Allowed && resp.Result != nil {
		msg, code := resp.Result.Message, resp.Result.Code
		vr.Message, vr.Code = &msg, &code
	}
	if e.Object != nil {
		vr.MutatedObject = e.Object
	}
	return vr, nil
}

// validateSettings accepts the settings the runner was loaded with; other
// settings are loaded to be judged.
func (r *kubePolicyRunner) validateSettings(_ context.Context, _ wasm.HostCaller, settings []byte) settingsValidationResponse {
	if !bytes.Equal(settings, r.settings) {
		p, err := kubepolicy.Load(settings, kubepolicy.Options{})
		if err != nil {
			return invalidSettings(err.Error())
		}
		p.Close()
	}
	return settingsValidationResponse{Valid: true}
}

func (r *kubePolicyRunner) close(context.Context) { r.policy.Close() }
