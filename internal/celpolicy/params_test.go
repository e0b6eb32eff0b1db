package celpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wardenhq/warden/internal/jsontape"
)

// fakeParams is an in-memory ParamSource. It is a fake on purpose: this
// package only builds the requests and reads the answers; the real source,
// the kubernetes host capability behind the engine's gate, is tested at the
// engine and cluster levels. It answers from objects (a get_resource by
// namespace/name, a list by the exact request), or fails with err, and
// records the requests it gets.
type fakeParams struct {
	objects map[string]string // "namespace/name" -> the object's JSON
	lists   map[ListResourcesByNamespaceRequest]string
	err     error

	mu   sync.Mutex
	gets []GetResourceRequest
	ls   []ListResourcesByNamespaceRequest
}

func (f *fakeParams) GetResource(_ context.Context, r GetResourceRequest) ([]byte, error) {
	f.mu.Lock()
	f.gets = append(f.gets, r)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	ns := "<nil>"
	if r.Namespace != nil {
		ns = *r.Namespace
	}
	obj, ok := f.objects[ns+"/"+r.Name]
	if !ok {
		return nil, fmt.Errorf("Callback evaluation failure: Cannot find %s/%s named '%s' inside of namespace 'Some(%q)'", r.APIVersion, r.Kind, r.Name, ns)
	}
	return []byte(obj), nil
}

func (f *fakeParams) ListResourcesByNamespace(_ context.Context, r ListResourcesByNamespaceRequest) ([]byte, error) {
	f.mu.Lock()
	f.ls = append(f.ls, r)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	list, ok := f.lists[r]
	if !ok {
		return []byte(`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[]}`), nil
	}
	return []byte(list), nil
}

// configMap is a ConfigMap holding maxreplicas.
func configMap(namespace, name, maxReplicas string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"labels":{"app":"my-app"}},"data":{"maxreplicas":%q}}`,
		name, namespace, maxReplicas)
}

// deployment is a Deployment's AdmissionRequest in a namespace ("" for
// none) with some replicas.
func deployment(namespace string, replicas int) json.RawMessage {
	ns := ""
	if namespace != "" {
		ns = fmt.Sprintf(`"namespace":%q,`, namespace)
	}
	return json.RawMessage(fmt.Sprintf(`{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},`+
		`"resource":{"group":"apps","version":"v1","resource":"deployments"},"name":"nginx",%s"operation":"CREATE",`+
		`"userInfo":{"username":"admin"},"object":{"metadata":{"name":"nginx"},"spec":{"replicas":%d}},"dryRun":false}`, ns, replicas))
}

// paramsSettings are cel-policy settings reading a ConfigMap's maxreplicas
// through paramRef (a JSON object's members, without braces).
func paramsSettings(paramRef string, extra ...string) string {
	return `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{` + paramRef + `},` +
		`"validations":[{"expression":"object.spec.replicas <= int(params.data.maxreplicas)",` +
		`"messageExpression":"'replicas must be no greater than ' + params.data.maxreplicas","reason":"Unauthorized"}]` +
		strings.Join(extra, "") + `}`
}

func strPtr(s string) *string { return &s }

func TestParams(t *testing.T) {
	byName := `"name":"limits","parameterNotFoundAction":"Deny"`
	selector := `"selector":{"matchLabels":{"app":"my-app"}},"namespace":"params","parameterNotFoundAction":"Deny"`
	twoLimits := `{"apiVersion":"v1","kind":"ConfigMapList","items":[` + configMap("params", "a", "5") + `,` + configMap("params", "b", "3") + `]}`
	listReq := ListResourcesByNamespaceRequest{APIVersion: "v1", Kind: "ConfigMap", Namespace: "params", LabelSelector: "app=my-app"}
	tests := []struct {
		name     string
		settings string
		src      *fakeParams
		request  json.RawMessage
		want     Result
		wantErr  string // the evaluation fails with this message
		wantGets []GetResourceRequest
		wantList []ListResourcesByNamespaceRequest
	}{
		{
			name:     "by name, in the request's namespace: accepted",
			settings: paramsSettings(byName),
			src:      &fakeParams{objects: map[string]string{"team-a/limits": configMap("team-a", "limits", "5")}},
			request:  deployment("team-a", 5),
			want:     Result{Accepted: true},
			wantGets: []GetResourceRequest{{APIVersion: "v1", Kind: "ConfigMap", Name: "limits", Namespace: strPtr("team-a")}},
		},
		{
			name:     "by name, in the request's namespace: rejected with the params in the message",
			settings: paramsSettings(byName),
			src:      &fakeParams{objects: map[string]string{"team-a/limits": configMap("team-a", "limits", "5")}},
			request:  deployment("team-a", 6),
			want:     Result{Message: "replicas must be no greater than 5", Code: 401},
		},
		{
			name:     "by name, in paramRef's namespace",
			settings: paramsSettings(`"name":"limits","namespace":"params","parameterNotFoundAction":"Deny"`),
			src:      &fakeParams{objects: map[string]string{"params/limits": configMap("params", "limits", "2")}},
			request:  deployment("team-a", 3),
			want:     Result{Message: "replicas must be no greater than 2", Code: 401},
			wantGets: []GetResourceRequest{{APIVersion: "v1", Kind: "ConfigMap", Name: "limits", Namespace: strPtr("params")}},
		},
		{
			name:     "by name, for a request without a namespace: the empty namespace",
			settings: paramsSettings(byName),
			src:      &fakeParams{objects: map[string]string{"/limits": configMap("", "limits", "5")}},
			request:  deployment("", 5),
			want:     Result{Accepted: true},
			wantGets: []GetResourceRequest{{APIVersion: "v1", Kind: "ConfigMap", Name: "limits", Namespace: strPtr("")}},
		},
		{
			// encoding/json decodes such a request slowly: the namespace is
			// read from its map, where the key keeps its case.
			name:     "by name, a Namespace key in another case is not the request's namespace",
			settings: paramsSettings(byName),
			src:      &fakeParams{objects: map[string]string{"/limits": configMap("", "limits", "5")}},
			request:  json.RawMessage(`{"Namespace":"team-a","object":{"spec":{"replicas":5}}}`),
			want:     Result{Accepted: true},
			wantGets: []GetResourceRequest{{APIVersion: "v1", Kind: "ConfigMap", Name: "limits", Namespace: strPtr("")}},
		},
		{
			name:     "by name, not found: rejected with the host's error",
			settings: paramsSettings(byName),
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			want: Result{Code: 400, Message: "failed to get params for performing policy evaluation: cannot get Kubernetes resource: " +
				`Callback evaluation failure: Cannot find v1/ConfigMap named 'limits' inside of namespace 'Some("team-a")'`},
		},
		{
			name:     "by name, not found, parameterNotFoundAction Allow: accepted",
			settings: paramsSettings(`"name":"limits","parameterNotFoundAction":"Allow"`),
			src:      &fakeParams{},
			request:  deployment("team-a", 100),
			want:     Result{Accepted: true},
		},
		{
			name:     "by name, not found, failurePolicy Ignore: accepted",
			settings: paramsSettings(byName, `,"failurePolicy":"Ignore"`),
			src:      &fakeParams{},
			request:  deployment("team-a", 100),
			want:     Result{Accepted: true},
		},
		{
			name:     "by name, an answer that is not an object",
			settings: paramsSettings(byName),
			src:      &fakeParams{objects: map[string]string{"team-a/limits": `[1]`}},
			request:  deployment("team-a", 1),
			want: Result{Code: 400, Message: "failed to get params for performing policy evaluation: cannot unmarshal Kubernetes resource response: " +
				"json: cannot unmarshal array into Go value of type map[string]interface {}"},
		},
		{
			name:     "by selector: every match accepts",
			settings: paramsSettings(selector),
			src:      &fakeParams{lists: map[ListResourcesByNamespaceRequest]string{listReq: twoLimits}},
			request:  deployment("team-a", 3),
			want:     Result{Accepted: true},
			wantList: []ListResourcesByNamespaceRequest{listReq},
		},
		{
			name:     "by selector: the first match that rejects answers",
			settings: paramsSettings(selector),
			src:      &fakeParams{lists: map[ListResourcesByNamespaceRequest]string{listReq: twoLimits}},
			request:  deployment("team-a", 4),
			want:     Result{Message: "replicas must be no greater than 3", Code: 401},
		},
		{
			name: "by selector: expressions and labels in the selector string, sorted by key",
			settings: paramsSettings(`"selector":{"matchLabels":{"z":"1","app":"my-app"},"matchExpressions":[` +
				`{"key":"tier","operator":"In","values":["b","a"]},{"key":"old","operator":"DoesNotExist"}]},"parameterNotFoundAction":"Deny"`),
			src: &fakeParams{lists: map[ListResourcesByNamespaceRequest]string{
				{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", LabelSelector: "app=my-app,!old,tier in (a,b),z=1"}: twoLimits,
			}},
			request: deployment("team-a", 1),
			want:    Result{Accepted: true},
		},
		{
			name:     "by selector, no match: rejected",
			settings: paramsSettings(selector),
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			want:     Result{Code: 400, Message: "failed to get params for performing policy evaluation: no parameters found"},
			wantList: []ListResourcesByNamespaceRequest{listReq},
		},
		{
			name:     "by selector, no match, failurePolicy Ignore: accepted",
			settings: paramsSettings(selector, `,"failurePolicy":"Ignore"`),
			src:      &fakeParams{},
			request:  deployment("team-a", 100),
			want:     Result{Accepted: true},
		},
		{
			name:     "by selector, the host call fails",
			settings: paramsSettings(selector),
			src:      &fakeParams{err: errors.New("Policy has not been granted access to Kubernetes v1/ConfigMap resources. The violation has been reported.")},
			request:  deployment("team-a", 1),
			want: Result{Code: 400, Message: "failed to get params for performing policy evaluation: cannot list Kubernetes resources: " +
				"Policy has not been granted access to Kubernetes v1/ConfigMap resources. The violation has been reported."},
		},
		{
			name:     "by selector, an answer without items",
			settings: paramsSettings(selector),
			src:      &fakeParams{lists: map[ListResourcesByNamespaceRequest]string{listReq: `{"kind":"ConfigMapList"}`}},
			request:  deployment("team-a", 1),
			want:     Result{Code: 400, Message: "failed to get params for performing policy evaluation: cannot unmarshal Kubernetes list resources response: %!w(<nil>)"},
		},
		{
			name:     "by selector, an unknown operator",
			settings: paramsSettings(`"selector":{"matchExpressions":[{"key":"a","operator":"Near"}]},"parameterNotFoundAction":"Deny"`),
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			want:     Result{Code: 400, Message: "failed to get params for performing policy evaluation: unknown label selector operator"},
		},
		{
			name:     "by selector, an invalid label value, with Allow: accepted",
			settings: paramsSettings(`"selector":{"matchLabels":{"app":"not valid!"}},"parameterNotFoundAction":"Allow"`),
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			want:     Result{Accepted: true},
		},
		{
			// cel-policy evaluates each variable once per request, whatever
			// the params: here the variable keeps the first match's limit
			// (5), so 4 replicas pass the second's (3).
			name: "by selector: a variable reading params keeps its first value, as in cel-policy",
			settings: `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"paramRef":{` + selector + `},` +
				`"variables":[{"name":"max","expression":"int(params.data.maxreplicas)"}],` +
				`"validations":[{"expression":"object.spec.replicas <= variables.max"}]}`,
			src:     &fakeParams{lists: map[ListResourcesByNamespaceRequest]string{listReq: twoLimits}},
			request: deployment("team-a", 4),
			want:    Result{Accepted: true},
		},
		{
			name:     "paramRef without paramKind fails every evaluation",
			settings: `{"paramRef":{"name":"limits","parameterNotFoundAction":"Allow"},"validations":[{"expression":"true"}]}`,
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			wantErr:  "failed to get params: paramRef is set but paramKind is not",
		},
		{
			name:     "paramKind without paramRef: params is not bound",
			settings: `{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},"validations":[{"expression":"params.data.x == '1'"}]}`,
			src:      &fakeParams{},
			request:  deployment("team-a", 1),
			wantErr:  "failed to evaluate expression: no such attribute(s): params",
		},
		{
			name:     "a request that does not decode is rejected before params are read",
			settings: paramsSettings(byName),
			src:      &fakeParams{},
			request:  json.RawMessage(`{"uid":5,"object":{}}`),
			want:     Result{Message: "Error deserializing request: json: cannot unmarshal number into Go struct field KubernetesAdmissionRequest.uid of type string", Code: 400},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(json.RawMessage(tt.settings))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			// From the request's text and from the parse of a review
			// holding it, as in TestValidate.
			var review jsontape.Tape
			if !review.Parse(`{"request":` + string(tt.request) + `}`) {
				t.Fatal("the request is not JSON")
			}
			for _, from := range []string{"text", "parsed review"} {
				src := &fakeParams{objects: tt.src.objects, lists: tt.src.lists, err: tt.src.err}
				var got Result
				if from == "text" {
					got, err = p.ValidateWith(context.Background(), src, tt.request)
				} else {
					got, err = p.ValidateParsedWith(context.Background(), src, &review, review.Member(0, "request"))
				}
				if tt.wantErr != "" {
					if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
						t.Fatalf("from the %s: ValidateWith = %+v, %v; want error %q", from, got, err, tt.wantErr)
					}
					continue
				}
				if err != nil || got != tt.want {
					t.Fatalf("from the %s: ValidateWith = %+v, %v;\nwant %+v", from, got, err, tt.want)
				}
				if tt.wantGets != nil && !slices.EqualFunc(src.gets, tt.wantGets, equalGets) {
					t.Errorf("from the %s: get_resource requests %s, want %s", from, jsonText(src.gets), jsonText(tt.wantGets))
				}
				if tt.wantList != nil && !slices.Equal(src.ls, tt.wantList) {
					t.Errorf("from the %s: list_resources_by_namespace requests %+v, want %+v", from, src.ls, tt.wantList)
				}
			}
		})
	}
}

func equalGets(a, b GetResourceRequest) bool { return jsonText(a) == jsonText(b) }

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestParamsSelectorErrors(t *testing.T) {
	// The label selector's checks are Kubernetes' own: an invalid key or
	// value is refused with the labels package's error.
	p, err := Compile(json.RawMessage(paramsSettings(`"selector":{"matchLabels":{"app":"not valid!"}},"parameterNotFoundAction":"Deny"`)))
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeParams{}
	got, err := p.ValidateWith(context.Background(), src, deployment("team-a", 1))
	const prefix = `failed to get params for performing policy evaluation: values[0][app]: Invalid value: "not valid!"`
	if err != nil || got.Accepted || got.Code != 400 || !strings.HasPrefix(got.Message, prefix) {
		t.Fatalf("ValidateWith = %+v, %v; want a 400 rejection beginning %q", got, err, prefix)
	}
	if len(src.ls) != 0 {
		t.Errorf("listed %+v with an invalid selector", src.ls)
	}
}

func TestParamsWithoutSource(t *testing.T) {
	p, err := Compile(json.RawMessage(paramsSettings(`"name":"limits","parameterNotFoundAction":"Allow"`)))
	if err != nil {
		t.Fatal(err)
	}
	// Not an acceptance (parameterNotFoundAction is Allow): an evaluation
	// that cannot look for params must not pass for one that found none.
	if got, err := p.Validate(context.Background(), deployment("team-a", 1)); !errors.Is(err, ErrNoParamSource) {
		t.Errorf("Validate = %+v, %v; want ErrNoParamSource", got, err)
	}
	// A policy without paramRef needs no source.
	p, err = Compile(json.RawMessage(`{"validations":[{"expression":"object.spec.replicas == 1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.ValidateWith(context.Background(), nil, deployment("team-a", 1)); err != nil || !got.Accepted {
		t.Errorf("ValidateWith(nil source) = %+v, %v; want accepted", got, err)
	}
}

// cancellingParams cancels the evaluation's context while it is asked, and
// fails as a host call cut short does.
type cancellingParams struct{ cancel context.CancelFunc }

func (c cancellingParams) GetResource(ctx context.Context, _ GetResourceRequest) ([]byte, error) {
	c.cancel()
	return nil, ctx.Err()
}

func (c cancellingParams) ListResourcesByNamespace(ctx context.Context, _ ListResourcesByNamespaceRequest) ([]byte, error) {
	c.cancel()
	return nil, ctx.Err()
}

func TestParamsContextEnded(t *testing.T) {
	// With parameterNotFoundAction Allow, a lookup cut short must fail the
	// evaluation, not accept it.
	p, err := Compile(json.RawMessage(paramsSettings(`"name":"limits","parameterNotFoundAction":"Allow"`)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got, err := p.ValidateWith(ctx, cancellingParams{cancel}, deployment("team-a", 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ValidateWith = %+v, %v; want an error wrapping context.Canceled", got, err)
	}
}

func TestKubernetesHostCall(t *testing.T) {
	// The payloads are those cel-policy sends through Kubewarden's Go SDK.
	type call struct{ operation, payload string }
	var calls []call
	src := KubernetesHostCall(func(_ context.Context, operation string, payload []byte) ([]byte, error) {
		calls = append(calls, call{operation, string(payload)})
		if operation == operationListResourcesByNamespace {
			return []byte(`{"items":[` + configMap("params", "a", "5") + `]}`), nil
		}
		return []byte(configMap("team-a", "limits", "5")), nil
	})
	for _, settings := range []string{
		paramsSettings(`"name":"limits","parameterNotFoundAction":"Deny"`),
		paramsSettings(`"selector":{"matchLabels":{"app":"my-app"}},"namespace":"params","parameterNotFoundAction":"Deny"`),
	} {
		p, err := Compile(json.RawMessage(settings))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p.ValidateWith(context.Background(), src, deployment("team-a", 5)); err != nil || !got.Accepted {
			t.Fatalf("ValidateWith = %+v, %v; want accepted", got, err)
		}
	}
	want := []call{
		{"get_resource", `{"api_version":"v1","kind":"ConfigMap","name":"limits","namespace":"team-a","disable_cache":false}`},
		{"list_resources_by_namespace", `{"api_version":"v1","kind":"ConfigMap","namespace":"params","label_selector":"app=my-app"}`},
	}
	if !slices.Equal(calls, want) {
		t.Errorf("host calls:\n%q\nwant\n%q", calls, want)
	}
}
