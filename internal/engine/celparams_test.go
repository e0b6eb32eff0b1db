package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"testing"

	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/hostcap"
)

// limitsConfigMap is a ConfigMap of namespace holding maxreplicas.
func limitsConfigMap(namespace, name, maxReplicas string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"labels":{"app":"limits"}},"data":{"maxreplicas":%q}}`,
		name, namespace, maxReplicas)
}

// TestCELRunnerParams evaluates native cel-policies that read params
// through the policy's host calls: the engine's gate, then hostcap's Host
// answering from a kwctl session, as wardenctl replays one.
func TestCELRunnerParams(t *testing.T) {
	const validation = `"validations":[{"expression":"object.spec.replicas <= int(params.data.maxreplicas)",` +
		`"messageExpression":"'at most ' + params.data.maxreplicas + ' replicas'","reason":"Forbidden"}]`
	byName := `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"name":"limits","parameterNotFoundAction":"Deny"},` + validation + `}`
	bySelector := `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{"selector":{"matchLabels":{"app":"limits"}},` +
		`"namespace":"params","parameterNotFoundAction":"Deny"},` + validation + `}`
	getLimits := hostcap.KubernetesGetResource{APIVersion: "v1", Kind: "ConfigMap", Name: "limits", Namespace: ptr("team-a")}
	listLimits := hostcap.KubernetesListResourceNamespace{APIVersion: "v1", Kind: "ConfigMap", Namespace: "params", LabelSelector: ptr("app=limits")}
	configMaps := []ContextAwareResource{configMapKind}
	tests := []struct {
		name      string
		settings  string
		allowed   []string // host capabilities
		resources []ContextAwareResource
		exchanges []hostcap.Exchange
		want      validationResponse
		wantAsked []hostcap.Request // the requests that reach the host
	}{
		{
			name: "by name, in the request's namespace", settings: byName, allowed: []string{"kubernetes/*"}, resources: configMaps,
			exchanges: []hostcap.Exchange{{Request: getLimits, Payload: []byte(limitsConfigMap("team-a", "limits", "2"))}},
			want:      validationResponse{Message: ptr("at most 2 replicas"), Code: ptr(int32(403))},
			wantAsked: []hostcap.Request{getLimits},
		},
		{
			name: "by selector, every match evaluated", settings: bySelector, allowed: []string{"kubernetes/*"}, resources: configMaps,
			exchanges: []hostcap.Exchange{{Request: listLimits, Payload: []byte(`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[` +
				limitsConfigMap("params", "a", "5") + "," + limitsConfigMap("params", "b", "1") + `]}`)}},
			want:      validationResponse{Message: ptr("at most 1 replicas"), Code: ptr(int32(403))},
			wantAsked: []hostcap.Request{listLimits},
		},
		{
			name: "the host call fails", settings: byName, allowed: []string{"kubernetes/*"}, resources: configMaps,
			exchanges: []hostcap.Exchange{{Request: getLimits, Failed: true, Error: `Cannot find v1/ConfigMap named 'limits' inside of namespace 'Some("team-a")'`}},
			want: validationResponse{Code: ptr(int32(400)), Message: ptr("failed to get params for performing policy evaluation: cannot get Kubernetes resource: " +
				`Callback evaluation failure: Cannot find v1/ConfigMap named 'limits' inside of namespace 'Some("team-a")'`)},
			wantAsked: []hostcap.Request{getLimits},
		},
		{
			name: "paramKind not among the contextAwareResources", settings: byName, allowed: []string{"kubernetes/*"},
			resources: []ContextAwareResource{namespaceKind},
			want: validationResponse{Code: ptr(int32(400)), Message: ptr("failed to get params for performing policy evaluation: cannot get Kubernetes resource: " +
				"Policy has not been granted access to Kubernetes v1/ConfigMap resources. The violation has been reported.")},
		},
		{
			name: "the host capability not granted", settings: bySelector, allowed: []string{"oci/*"}, resources: configMaps,
			want: validationResponse{Code: ptr(int32(400)), Message: ptr("failed to get params for performing policy evaluation: cannot list Kubernetes resources: " +
				"Policy has not been granted access to the 'kubernetes/list_resources_by_namespace' host capability. The violation has been reported.")},
		},
	}
	review := admissiontest.New(admissiontest.WithKind("apps", "v1", "Deployment"), admissiontest.WithNamespace("team-a"),
		admissiontest.WithObject(`{"metadata":{"name":"web","namespace":"team-a"},"spec":{"replicas":3}}`))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := newCELRunner(json.RawMessage(tt.settings))
			if err != nil {
				t.Fatal(err)
			}
			rec := hostcap.NewRecorder(hostcap.NewReplayer(&hostcap.Session{Exchanges: tt.exchanges}, "cluster.yml", nil))
			host := &hostCalls{policyID: "p", allowed: tt.allowed, resources: tt.resources,
				caps: hostcap.NewHost(rec), logger: slog.New(slog.DiscardHandler)}
			got, err := r.validate(context.Background(), host, requestOf(t, review), json.RawMessage(tt.settings))
			if err != nil || !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("validate = %+v, %v; want %+v", got, err, tt.want)
			}
			var asked []hostcap.Request
			for _, ex := range rec.Session().Exchanges {
				asked = append(asked, ex.Request)
			}
			if !reflect.DeepEqual(asked, tt.wantAsked) {
				t.Errorf("host requests %v, want %v", asked, tt.wantAsked)
			}
		})
	}
}
