package celpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/jsontape"
)

// admissionRequest is an AdmissionRequest for a Pod with the given object
// and oldObject JSON ("null" for none).
func admissionRequest(op, object, oldObject string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002",`+
		`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
		`"requestKind":{"group":"","version":"v1","kind":"Pod"},"requestResource":{"group":"","version":"v1","resource":"pods"},`+
		`"name":"pod-name","namespace":"default","operation":%q,`+
		`"userInfo":{"username":"admin","groups":["system:authenticated"]},`+
		`"object":%s,"oldObject":%s,"dryRun":false,"options":null}`, op, object, oldObject))
}

const (
	pod         = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod-name","namespace":"default","labels":{"app":"web","team":"a"}},"spec":{"replicas":3,"containers":[{"name":"web","image":"nginx:1.27","resources":{"limits":{"memory":"512Mi"}}},{"name":"side","image":"busybox:latest","securityContext":{"privileged":true}}]}}`
	namespaceNS = `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"namespace-name"}}`
)

func TestValidate(t *testing.T) {
	create := admissionRequest("CREATE", pod, "null")
	tests := []struct {
		name     string
		settings string
		request  json.RawMessage
		want     Result
		wantErr  string // the evaluation fails with this message
	}{
		{
			name:     "accepted when every validation holds",
			settings: `{"validations":[{"expression":"object.metadata.name == 'pod-name'"},{"expression":"request.operation == 'CREATE'"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "rejected with the message",
			settings: `{"validations":[{"expression":"object.metadata.name != 'pod-name'","message":"not true"}]}`,
			request:  create,
			want:     Result{Message: "not true", Code: 400},
		},
		{
			name:     "rejected with the message expression",
			settings: `{"validations":[{"expression":"object.metadata.name != 'namespace-name'","messageExpression":"object.metadata.name + ' is not allowed'"}]}`,
			request:  admissionRequest("CREATE", namespaceNS, "null"),
			want:     Result{Message: "namespace-name is not allowed", Code: 400},
		},
		{
			name:     "without a message, the failed expression, trimmed",
			settings: `{"validations":[{"expression":"  object.metadata.name != 'pod-name' "}]}`,
			request:  create,
			want:     Result{Message: "failed expression: object.metadata.name != 'pod-name'", Code: 400},
		},
		{
			name:     "reason Unauthorized is 401",
			settings: `{"validations":[{"expression":"false","message":"failed","reason":"Unauthorized"}]}`,
			request:  create,
			want:     Result{Message: "failed", Code: 401},
		},
		{
			name:     "reason Forbidden is 403",
			settings: `{"validations":[{"expression":"false","message":"failed","reason":"Forbidden"}]}`,
			request:  create,
			want:     Result{Message: "failed", Code: 403},
		},
		{
			name:     "reason RequestEntityTooLarge is 413",
			settings: `{"validations":[{"expression":"false","message":"failed","reason":"RequestEntityTooLarge"}]}`,
			request:  create,
			want:     Result{Message: "failed", Code: 413},
		},
		{
			name: "the first validation that fails answers, later ones are not evaluated",
			settings: `{"validations":[{"expression":"true"},{"expression":"false","message":"second","reason":"Forbidden"},` +
				`{"expression":"false","message":"third"},{"expression":"object.missing == 1"}]}`,
			request: create,
			want:    Result{Message: "second", Code: 403},
		},
		{
			name: "variables, one reading others",
			settings: `{"variables":[{"name":"forbiddenName","expression":"'pod-name'"},{"name":"podMeta","expression":"request.object.metadata"},` +
				`{"name":"podName","expression":"variables.podMeta.name"}],` +
				`"validations":[{"expression":"variables.podName != variables.forbiddenName","messageExpression":"variables.forbiddenName + ' is forbidden'"}]}`,
			request: create,
			want:    Result{Message: "pod-name is forbidden", Code: 400},
		},
		{
			name:     "a variable used twice",
			settings: `{"variables":[{"name":"images","expression":"object.spec.containers.map(c, c.image)"}],"validations":[{"expression":"size(variables.images) == 2 && 'nginx:1.27' in variables.images"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "oldObject on UPDATE",
			settings: `{"validations":[{"expression":"object.metadata.labels.team != oldObject.metadata.labels.team","message":"team unchanged"}]}`,
			request:  admissionRequest("UPDATE", pod, strings.Replace(pod, `"team":"a"`, `"team":"b"`, 1)),
			want:     Result{Accepted: true},
		},
		{
			// cel-policy decodes a null oldObject into a nil Go map, which
			// CEL sees as an empty map, not null; request.oldObject is null.
			name:     "oldObject on CREATE is an empty map, request.oldObject is null",
			settings: `{"validations":[{"expression":"size(oldObject) == 0 && oldObject != null && !has(oldObject.metadata) && request.oldObject == null"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "oldObject absent is an empty map too",
			settings: `{"validations":[{"expression":"size(oldObject) == 0"}]}`,
			request:  json.RawMessage(`{"operation":"CREATE","object":` + pod + `}`),
			want:     Result{Accepted: true},
		},
		{
			name:     "object on DELETE is an empty map",
			settings: `{"validations":[{"expression":"size(object) == 0 && oldObject.metadata.name == 'pod-name'"}]}`,
			request:  admissionRequest("DELETE", "null", pod),
			want:     Result{Accepted: true},
		},
		{
			// encoding/json decodes every JSON number as a float64.
			name:     "numbers are doubles",
			settings: `{"validations":[{"expression":"object.spec.replicas == 3 && object.spec.replicas > 2 && type(object.spec.replicas) == double"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "no privileged container, with all()",
			settings: `{"validations":[{"expression":"object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)","message":"privileged"}]}`,
			request:  create,
			want:     Result{Message: "privileged", Code: 400},
		},
		{
			name:     "Kubernetes quantity library",
			settings: `{"validations":[{"expression":"quantity(object.spec.containers[0].resources.limits.memory).isLessThan(quantity('1Gi')) && quantity('1Gi').compareTo(quantity('1024Mi')) == 0"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "regex matches and find",
			settings: `{"validations":[{"expression":"object.metadata.name.matches('^[a-z]+-[a-z]+$') && object.spec.containers[0].image.find('[0-9.]+$') == '1.27'"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "Kubernetes lists library and sets extension",
			settings: `{"validations":[{"expression":"object.spec.containers.map(c, c.name).isSorted() == false && [3, 1, 2].max() == 3 && sets.contains(object.metadata.labels.map(k, k), ['team'])"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "url, ip and cidr libraries",
			settings: `{"validations":[{"expression":"url('https://registry.example.com:5000/v2/').getHost() == 'registry.example.com:5000' && ip('10.0.0.1').family() == 4 && cidr('10.0.0.0/8').containsIP('10.1.2.3')"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "strings, base64, optional and two-variable comprehension",
			settings: `{"validations":[{"expression":"'a,b'.split(',') == ['a', 'b'] && base64.decode('aGk=') == b'hi' && object.?spec.?nodeName.orValue('none') == 'none' && object.metadata.labels.all(k, v, k != '' && v != '')"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "semver, format and the lists extension",
			settings: `{"validations":[{"expression":"semver('1.2.3').isLessThan(semver('1.10.0')) && !format.dns1123Label().validate('pod-name').hasValue() && lists.range(3) == [0, 1, 2]"}]}`,
			request:  create,
			want:     Result{Accepted: true},
		},
		{
			name:     "a missing field fails the evaluation",
			settings: `{"validations":[{"expression":"object.metadata.missing == 'x'"}]}`,
			request:  create,
			wantErr:  "failed to evaluate expression: no such key: missing",
		},
		{
			name:     "a variable that fails fails the validation reading it",
			settings: `{"variables":[{"name":"x","expression":"object.spec.missing"}],"validations":[{"expression":"variables.x == 1"}]}`,
			request:  create,
			wantErr:  "failed to evaluate expression: no such key: missing",
		},
		{
			// JSON numbers are doubles: double + int has no overload.
			name:     "a runtime type error fails the evaluation",
			settings: `{"validations":[{"expression":"object.spec.replicas + 1 == 4"}]}`,
			request:  create,
			wantErr:  "failed to evaluate expression: no such overload",
		},
		{
			name:     "params without paramRef are not bound",
			settings: `{"validations":[{"expression":"params.max > 1"}]}`,
			request:  create,
			wantErr:  "failed to evaluate expression: no such attribute(s): params",
		},
		{
			name:     "namespaceObject is null for a cluster-scoped object",
			settings: `{"validations":[{"expression":"namespaceObject == null"}]}`,
			request:  admissionRequest("CREATE", namespaceNS, "null"),
			want:     Result{Accepted: true},
		},
		{
			name:     "namespaceObject of a namespaced object needs a host call",
			settings: `{"validations":[{"expression":"namespaceObject.metadata.name == 'default'"}]}`,
			request:  create,
			wantErr:  `failed to evaluate expression: namespaceObject: reading Namespace "default" needs the Kubernetes host capability`,
		},
		{
			name:     "a raw request is evaluated as an AdmissionRequest",
			settings: `{"validations":[{"expression":"object.user == 'tonio' && request.action == 'eats'"}]}`,
			request:  json.RawMessage(`{"action":"eats","object":{"user":"tonio"}}`),
			want:     Result{Accepted: true},
		},
		{
			name:     "a repeated key keeps its last value",
			settings: `{"validations":[{"expression":"object.metadata.name == 'b' && size(object.metadata) == 1"}]}`,
			request:  json.RawMessage(`{"object":{"metadata":{"name":"a","name":"b"}}}`),
			want:     Result{Accepted: true},
		},
		{
			name:     "a key matching a field name in another case is that field, as in encoding/json",
			settings: `{"validations":[{"expression":"object.metadata.name == 'x' && has(request.Object)"}]}`,
			request:  json.RawMessage(`{"Object":{"metadata":{"name":"x"}}}`),
			want:     Result{Accepted: true},
		},
		{
			name:     "escaped strings",
			settings: `{"validations":[{"expression":"object.s == 'a\"b\\u00e9\\n' && object.t == '\\U0001F600'"}]}`,
			request:  json.RawMessage(`{"object":{"s":"a\"b\u00e9\n","t":"\ud83d\ude00"}}`),
			want:     Result{Accepted: true},
		},
		{
			name:     "a request that is not an object is rejected with 400",
			settings: `{"validations":[{"expression":"true"}]}`,
			request:  json.RawMessage(`[1]`),
			want:     Result{Message: "Error deserializing request: json: cannot unmarshal array into Go value of type celpolicy.KubernetesAdmissionRequest", Code: 400},
		},
		{
			name:     "a field of the wrong type is rejected with 400",
			settings: `{"validations":[{"expression":"true"}]}`,
			request:  json.RawMessage(`{"uid":5,"object":{}}`),
			want:     Result{Message: "Error deserializing request: json: cannot unmarshal number into Go struct field KubernetesAdmissionRequest.uid of type string", Code: 400},
		},
		{
			name:     "invalid JSON is rejected with 400",
			settings: `{"validations":[{"expression":"true"}]}`,
			request:  json.RawMessage(`{"object":{]}`),
			want:     Result{Message: "Error deserializing validation request: invalid character ']' looking for beginning of object key string", Code: 400},
		},
		{
			name:     "a request without object fails",
			settings: `{"validations":[{"expression":"true"}]}`,
			request:  json.RawMessage(`{"uid":"x"}`),
			wantErr:  "cannot unmarshal request object unexpected end of JSON input",
		},
		{
			name:     "an oldObject that is not an object fails",
			settings: `{"validations":[{"expression":"true"}]}`,
			request:  json.RawMessage(`{"object":{},"oldObject":"x"}`),
			wantErr:  "cannot unmarshal request oldObject json: cannot unmarshal string into Go value of type map[string]interface {}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(json.RawMessage(tt.settings))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			// Each request is evaluated from its text, and from the parse
			// of a review holding it, as the policy server hands it over.
			// The review's own object is a decoy: only the request counts.
			var review jsontape.Tape
			parsed := review.Parse(`{"object":{"metadata":{"name":"decoy","labels":{}}},"request":` + string(tt.request) + `}`)
			for _, from := range []string{"text", "parsed review"} {
				var got Result
				var err error
				if from == "text" {
					got, err = p.Validate(context.Background(), tt.request)
				} else if parsed {
					got, err = p.ValidateParsed(context.Background(), &review, review.Member(0, "request"))
				} else {
					continue // not JSON: the server's decoder refuses it first
				}
				if tt.wantErr != "" {
					if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
						t.Fatalf("from the %s: Validate = %+v, %v; want error %q", from, got, err, tt.wantErr)
					}
					continue
				}
				if err != nil || got != tt.want {
					t.Fatalf("from the %s: Validate = %+v, %v; want %+v", from, got, err, tt.want)
				}
			}
		})
	}
}

// bigList is a request whose object has a list of n numbers.
func bigList(n int) json.RawMessage {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	return json.RawMessage(`{"object":{"items":[` + strings.Join(items, ",") + `]}}`)
}

func TestCostLimits(t *testing.T) {
	tests := []struct {
		name     string
		settings string
		opts     []Option
		wantErr  string
	}{
		{
			name:     "nested comprehensions over a large list go over the limit of one expression",
			settings: `{"validations":[{"expression":"object.items.all(a, object.items.all(b, a + b >= 0.0))"}]}`,
			wantErr:  "failed to evaluate expression: validations[0].expression: CEL cost limit exceeded: the expression went over its cost limit of 1000000",
		},
		{
			name:     "a variable over the limit fails the validation that reads it",
			settings: `{"variables":[{"name":"pairs","expression":"object.items.map(a, object.items.map(b, a + b))"}],"validations":[{"expression":"size(variables.pairs) > 0"}]}`,
			wantErr:  "failed to evaluate expression: variables[0].expression: CEL cost limit exceeded",
		},
		{
			// Each expression costs about 10,000 (5 per item): the third
			// does not fit in what the first two leave.
			name: "expressions each within the limit go over the budget of the evaluation together",
			settings: `{"validations":[{"expression":"object.items.all(a, a >= 0.0)"},{"expression":"object.items.all(a, a >= 0.0)"},` +
				`{"expression":"object.items.all(a, a >= 0.0)"}]}`,
			opts:    []Option{WithCostBudget(25_000)},
			wantErr: "failed to evaluate expression: validations[2].expression: CEL cost limit exceeded: the evaluation went over its cost budget of 25000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(json.RawMessage(tt.settings), tt.opts...)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			got, err := p.Validate(context.Background(), bigList(2000))
			if !errors.Is(err, ErrCostLimit) || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %+v, %v; want ErrCostLimit %q", got, err, tt.wantErr)
			}
		})
	}
}

func TestValidateContext(t *testing.T) {
	p, err := Compile(json.RawMessage(`{"validations":[{"expression":"object.items.all(a, string(a).size() > 0)"}]}`),
		WithCostLimit(1<<62), WithCostBudget(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Validate(ctx, bigList(10)); !errors.Is(err, context.Canceled) {
		t.Errorf("Validate with a cancelled context: %v, want context.Canceled", err)
	}
	// Far more iterations than fit in the deadline: the comprehension is
	// interrupted.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := p.Validate(ctx, bigList(200_000)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Validate past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

// TestValidateConcurrent evaluates one policy from several goroutines; run
// with -race.
func TestValidateConcurrent(t *testing.T) {
	p, err := Compile(json.RawMessage(`{"variables":[{"name":"n","expression":"object.metadata.name"}],` +
		`"validations":[{"expression":"variables.n.startsWith('pod-')","messageExpression":"variables.n + ' is not a pod name'"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("pod-%d-%d", g, i)
				want := Result{Accepted: true}
				if i%2 == 1 {
					name = fmt.Sprintf("x-%d-%d", g, i)
					want = Result{Message: name + " is not a pod name", Code: 400}
				}
				got, err := p.Validate(context.Background(), admissionRequest("CREATE", `{"metadata":{"name":"`+name+`"}}`, "null"))
				if err != nil || got != want {
					t.Errorf("Validate(%s) = %+v, %v; want %+v", name, got, err, want)
				}
			}
		})
	}
	wg.Wait()
}

// TestFastPathAgrees evaluates expressions on the fast decoder's values and
// on cel-policy's encoding/json maps: answers and errors must be the same.
func TestFastPathAgrees(t *testing.T) {
	fast := admissionRequest("CREATE", pod, "null")
	// A key that differs from a field name only in case sends a request
	// down cel-policy's own path; it changes nothing the expressions read.
	slow := json.RawMessage(`{"UID":"x",` + string(fast[1:]))
	var in input
	if rej, err := in.decode(&document{}, slow, json.RawMessage(`{}`)); rej != nil || err != nil {
		t.Fatal(rej, err)
	}
	if _, ok := in.object.(map[string]any); !ok {
		t.Fatalf("the slow request decoded to %T, want encoding/json's map", in.object)
	}
	for _, expr := range []string{
		`object.metadata.labels == {'app': 'web', 'team': 'a'}`,
		`{'app': 'web', 'team': 'a'} == object.metadata.labels`,
		`object.metadata == {'name': dyn('pod-name'), 'namespace': dyn('default'), 'labels': dyn({'app': 'web', 'team': 'a'})}`,
		`object.spec.containers.map(c, c.name) == ['web', 'side']`,
		`object.spec.containers[0] == object.spec.containers[0] && object.spec.containers[0] != object.spec.containers[1]`,
		`object.spec.containers.filter(c, has(c.securityContext)).size() == 1`,
		`object.spec.containers.exists_one(c, c.name == 'web') && object.metadata.labels.exists(k, k == 'team')`,
		`object.spec.containers.all(a, object.spec.containers.exists(b, a.name == b.name)) && object.spec.containers.all(i, c, i < 2)`,
		`object.metadata.labels.all(k, v, v != '') && object.metadata.labels.transformMap(k, v, v + '!')['team'] == 'a!'`,
		`sets.equivalent(object.spec.containers.map(c, c.image), ['busybox:latest', 'nginx:1.27'])`,
		`object.spec.containers.sortBy(c, c.name)[0].name == 'side'`,
		`size(object.spec.containers + [1]) == 3 && 1 in object.spec.containers + [1]`,
		`'512Mi' in object.spec.containers.map(c, c.?resources.?limits.?memory.orValue(''))`,
		`type(object.spec.containers) == list && type(object.metadata) == map && type(object.spec.replicas) == double`,
		`dyn(object.spec.replicas) == 3 && object.spec.replicas == 3u && object.spec.replicas < 3.5`,
		`object.metadata.labels.map(k, k).size() == 2 && object.metadata.labels.size() == 2`,
		`'team' in object.metadata.labels && !('nope' in object.metadata.labels) && !has(object.metadata.nope)`,
		`object.spec.containers[1].securityContext.privileged == true`,
		`object.spec.containers[5] == null`,
		`object.metadata.labels[1] == 'x'`,
		`object.spec.x == 1`,
		`object.metadata.name.nope == 1`,
		`object.spec.containers.all(c, c.resources.limits.memory == '512Mi')`,
		`request.userInfo.groups == ['system:authenticated'] && request.options == null && request.dryRun == false`,
		`oldObject == {} && size(oldObject) == 0 && oldObject.?x.orValue(1) == 1`,
		`string(object.spec.replicas) == '3' && int(object.spec.replicas) == 3`,
	} {
		t.Run(expr, func(t *testing.T) {
			p, err := Compile(json.RawMessage(fmt.Sprintf(`{"validations":[{"expression":%q,"message":"false"}]}`, expr)))
			if err != nil {
				t.Fatal(err)
			}
			got, gotErr := p.Validate(context.Background(), fast)
			want, wantErr := p.Validate(context.Background(), slow)
			if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Errorf("fast path: %+v, %v; cel-policy's: %+v, %v", got, gotErr, want, wantErr)
			}
		})
	}
}

// TestValuesReusedAcrossEvaluations evaluates requests of different sizes
// in turn, so that each reuses the buffers of the values of the one before
// (one evaluation at a time shares a pooled activation).
func TestValuesReusedAcrossEvaluations(t *testing.T) {
	p, err := Compile(json.RawMessage(`{"validations":[{"expression":"object.spec.containers.all(c, c.image.endsWith(':' + string(c.tag)))",` +
		`"messageExpression":"'bad image in ' + object.metadata.name + ' of ' + string(size(object.spec.containers))"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	request := func(name string, n int, bad bool) json.RawMessage {
		containers := make([]string, n)
		for i := range containers {
			tag := i
			if bad && i == n-1 {
				tag = -1
			}
			containers[i] = fmt.Sprintf(`{"name":"c%d","image":"img:%d","tag":%d,"securityContext":{"runAsUser":%d}}`, i, i, tag, i)
		}
		return admissionRequest("CREATE", fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"containers":[%s]}}`,
			name, strings.Join(containers, ",")), "null")
	}
	for _, tt := range []struct {
		name string
		n    int
		bad  bool
		want Result
	}{
		{"big", 300, false, Result{Accepted: true}},
		{"small", 2, true, Result{Message: "bad image in small of 2", Code: 400}},
		{"big-bad", 300, true, Result{Message: "bad image in big-bad of 300", Code: 400}},
		{"big-again", 300, false, Result{Accepted: true}},
		{"tiny", 1, false, Result{Accepted: true}},
	} {
		if got, err := p.Validate(context.Background(), request(tt.name, tt.n, tt.bad)); err != nil || got != tt.want {
			t.Errorf("%s: Validate = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}
