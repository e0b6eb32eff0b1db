package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/admission/admissiontest"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/wasm"
)

// envFixture is an Environment on a runtime of its own, with the test
// policies' modules written into policies.yml documents by name:
// {labels} becomes the file:// URI of the labels test policy.
type envFixture struct {
	t   *testing.T
	rt  *wasm.Runtime
	env *Environment
	dir string
}

func newEnvFixture(t *testing.T, caps HostCapabilities) *envFixture {
	t.Helper()
	return newEnvFixtureWith(t, Options{HostCapabilities: caps})
}

// newEnvFixtureWith is newEnvFixture with opts, whose runtime, workers and
// timeouts it sets.
func newEnvFixtureWith(t *testing.T, opts Options) *envFixture {
	t.Helper()
	// With a disk cache, as the policy server has by default, a module
	// compiles again quickly after being freed.
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	opts.Runtime, opts.Workers, opts.TimeoutProtection, opts.DefaultTimeout = rt, 2, true, 30*time.Second
	env, err := NewEnvironment(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close(context.Background()) })
	return &envFixture{t: t, rt: rt, env: env, dir: t.TempDir()}
}

// configs parses a policies.yml document after putting module URIs in it.
func (f *envFixture) configs(doc string) map[string]*PolicyConfig {
	f.t.Helper()
	for _, name := range []string{"labels", "wasi-log", "host-call", "loop", "trap"} {
		if strings.Contains(doc, "{"+name+"}") {
			doc = strings.ReplaceAll(doc, "{"+name+"}", "file://"+policybuild.ForTest(f.t, name))
		}
	}
	doc = strings.ReplaceAll(doc, "{dir}", f.dir)
	configs, err := ParsePolicies([]byte(doc))
	if err != nil {
		f.t.Fatal(err)
	}
	return configs
}

// answer evaluates a Pod with labels (a comma-separated list of names)
// and returns "accept", the rejection message, or the error.
func (f *envFixture) answer(id, labels string) string {
	f.t.Helper()
	return answerPod(f.env.Validate, id, labels)
}

func answerPod(validate func(context.Context, string, *admission.Request, Origin) (*admission.Response, error), id, labels string) string {
	set := map[string]string{}
	for l := range strings.SplitSeq(labels, ",") {
		if l != "" {
			set[l] = "yes"
		}
	}
	body := admissiontest.New(admissiontest.WithLabels(set)).JSON()
	req, err := admission.DecodeReview(body)
	if err != nil {
		return "decode: " + err.Error()
	}
	defer req.Release()
	resp, err := validate(context.Background(), id, req, OriginValidate)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case resp.Allowed:
		return "accept"
	case resp.Status == nil:
		return "reject"
	}
	return resp.Status.Message
}

// status returns the environment's status of id, or a zero status.
func (f *envFixture) status(id string) PolicyStatus {
	for _, st := range f.env.Status() {
		if st.ID == id {
			return st
		}
	}
	return PolicyStatus{}
}

// TestEnvironmentApply changes the policies of an environment step by step
// and checks, after each, what every policy answers and what the
// environment says of it: a new version replaces the old only when it
// builds completely, a broken one leaves the old one serving, and a
// removed policy is gone.
func TestEnvironmentApply(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := os.WriteFile(filepath.Join(f.dir, "not-wasm.wasm"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	const denyFoo = "a: {module: {labels}, settings: {denied_labels: [foo]}}\n"
	const denyBar = "a: {module: {labels}, settings: {denied_labels: [bar]}}\n"
	if err := f.env.Init(context.Background(), f.configs(denyFoo)); err != nil {
		t.Fatal(err)
	}
	type step struct {
		name    string
		doc     string
		changes []string          // "id action" or "id action: error substring"
		answers map[string]string // "id labels" -> answer
		states  map[string]string // id -> "state generation"
	}
	steps := []step{
		{name: "update", doc: denyBar, changes: []string{"a update"},
			answers: map[string]string{"a foo": "accept", "a bar": "label bar is denied"},
			states:  map[string]string{"a": "active 2"}},
		{name: "invalid settings keep the old version",
			doc:     "a: {module: {labels}, settings: {denied_labels: 5}}\n",
			changes: []string{"a update: Policy settings are invalid: denied_labels must be a list of strings"},
			answers: map[string]string{"a bar": "label bar is denied"},
			states:  map[string]string{"a": "stale 2"}},
		{name: "a missing module keeps the old version", doc: "a: {module: 'file://{dir}/missing.wasm'}\n",
			changes: []string{"a update: missing.wasm: no such file or directory"},
			answers: map[string]string{"a bar": "label bar is denied"},
			states:  map[string]string{"a": "stale 2"}},
		{name: "a module that is not wasm keeps the old version", doc: "a: {module: 'file://{dir}/not-wasm.wasm'}\n",
			changes: []string{"a update: not-wasm.wasm"},
			answers: map[string]string{"a bar": "label bar is denied"}},
		{name: "back to what serves: nothing changes", doc: denyBar,
			answers: map[string]string{"a bar": "label bar is denied"},
			states:  map[string]string{"a": "active 2"}},
		{name: "add", doc: denyBar + "b: {module: {wasi-log}}\n", changes: []string{"b add"},
			answers: map[string]string{"a bar": "label bar is denied", "b bar": "accept"},
			states:  map[string]string{"b": "active 1"}},
		{name: "a new policy that fails is absent", doc: denyBar + "b: {module: {wasi-log}}\nc: {module: 'file://{dir}/missing.wasm'}\n",
			changes: []string{"c add: no such file"},
			answers: map[string]string{"a bar": "label bar is denied", "b bar": "accept", "c bar": "error: unknown policy: c"},
			states:  map[string]string{"c": "failed 0"}},
		{name: "remove", doc: denyBar, changes: []string{"b remove"},
			answers: map[string]string{"a bar": "label bar is denied", "b bar": "error: unknown policy: b"},
			states:  map[string]string{"b": " 0", "c": " 0"}},
		{name: "add a group", doc: denyBar + "g: {expression: 'm()', message: 'no', policies: {m: {module: {labels}, settings: {denied_labels: [foo]}}}}\n",
			changes: []string{"g add"},
			answers: map[string]string{"g foo": "no", "g baz": "accept", "g/m foo": "label foo is denied"}},
		{name: "a group's member changes", doc: denyBar + "g: {expression: 'm()', message: 'no', policies: {m: {module: {labels}, settings: {denied_labels: [baz]}}}}\n",
			changes: []string{"g update"},
			answers: map[string]string{"g foo": "accept", "g baz": "no", "g/m baz": "label baz is denied", "a bar": "label bar is denied"},
			states:  map[string]string{"g": "active 2"}},
		{name: "a group whose member breaks keeps its old version",
			doc:     denyBar + "g: {expression: 'm()', message: 'no', policies: {m: {module: 'file://{dir}/missing.wasm'}}}\n",
			changes: []string{"g update: g/m"},
			answers: map[string]string{"g baz": "no", "g/m baz": "label baz is denied"},
			states:  map[string]string{"g": "stale 2"}},
		{name: "a member goes", doc: denyBar + "g: {expression: 'true', message: 'no', policies: {other: {module: {wasi-log}}}}\n",
			changes: []string{"g update"},
			answers: map[string]string{"g baz": "accept", "g/m baz": "error: unknown policy: g/m", "g/other baz": "accept"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			var got []string
			for _, c := range f.env.Apply(context.Background(), f.configs(s.doc)) {
				line := c.ID + " " + c.Action
				if c.Err != nil {
					line += ": " + c.Err.Error()
				}
				got = append(got, line)
			}
			if len(got) != len(s.changes) {
				t.Fatalf("changes %q, want %q", got, s.changes)
			}
			for i, want := range s.changes {
				change, errText, failed := strings.Cut(want, ": ")
				gotChange, gotErr, gotFailed := strings.Cut(got[i], ": ")
				if gotChange != change || gotFailed != failed || !strings.Contains(gotErr, errText) {
					t.Errorf("change %d = %q, want %q", i, got[i], want)
				}
			}
			for q, want := range s.answers {
				id, labels, _ := strings.Cut(q, " ")
				if got := f.answer(id, labels); got != want {
					t.Errorf("%s with labels %q answers %q, want %q", id, labels, got, want)
				}
			}
			for id, want := range s.states {
				st := f.status(id)
				if got := fmt.Sprintf("%s %d", st.State, st.Generation); got != want {
					t.Errorf("status of %s = %q (%+v), want %q", id, got, st, want)
				}
				if (st.State == StateStale || st.State == StateFailed) != (st.LastError != "") {
					t.Errorf("status of %s = %+v: a last error goes with stale and failed states only", id, st)
				}
			}
		})
	}
	f.env.Apply(context.Background(), nil)
	if n, m, i := f.env.SharedRunners(), f.rt.CompiledModules(), f.rt.LiveInstances(); n+m+int(i) != 0 {
		t.Errorf("with no policy left: %d pools, %d compiled modules, %d instances; want none", n, m, i)
	}
}

// blockingCaps answers host calls only when released, so that an
// evaluation stays in flight as long as the test needs: a stand-in for a
// slow registry or API server, the one fault here a real part cannot be
// made to cause on demand.
type blockingCaps struct {
	called  chan struct{}
	release chan struct{}
}

func (c *blockingCaps) HostCall(ctx context.Context, _, _ string, _ []byte) ([]byte, error) {
	c.called <- struct{}{}
	select {
	case <-c.release:
		return []byte(`["10.0.0.1"]`), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestEnvironmentSwapInFlight replaces a policy while an evaluation of its
// old version waits on a host call: the swap does not wait for it, new
// requests get the new version at once, the old evaluation finishes with
// the old version's answer, and only then are the old module and its
// instances freed.
func TestEnvironmentSwapInFlight(t *testing.T) {
	// A guest waiting on a host call holds its guest slot: give the
	// runtime a second one, as the policy server's SetGOMAXPROCS does, for
	// the new version to initialise in.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 3)))
	caps := &blockingCaps{called: make(chan struct{}, 1), release: make(chan struct{})}
	f := newEnvFixture(t, caps)
	const slow = `p: {module: {host-call}, hostCapabilities: ["net/*"], settings: {calls: [{namespace: net, operation: v1/dns_lookup_host, payload: example.com}]}}`
	if err := f.env.Init(context.Background(), f.configs(slow)); err != nil {
		t.Fatal(err)
	}
	old := make(chan string, 1)
	go func() { old <- f.answer("p", "") }()
	select {
	case <-caps.called:
	case <-time.After(time.Minute):
		t.Fatal("the evaluation never made its host call")
	}
	changes := f.env.Apply(context.Background(), f.configs("p: {module: {labels}, settings: {denied_labels: [foo]}}"))
	if len(changes) != 1 || changes[0].Err != nil {
		t.Fatalf("changes = %+v", changes)
	}
	if got := f.answer("p", "foo"); got != "label foo is denied" {
		t.Errorf("during the old evaluation, the new version answers %q", got)
	}
	if n := f.rt.CompiledModules(); n != 2 {
		t.Errorf("%d modules compiled while the old version runs, want 2 (old and new)", n)
	}
	close(caps.release)
	if got := <-old; got != "accept" {
		t.Errorf("the evaluation in flight answered %q, want the old version's accept", got)
	}
	if n := f.rt.CompiledModules(); n != 1 {
		t.Errorf("%d modules compiled after the old evaluation finished, want 1", n)
	}
}

// TestEnvironmentSwapsLeakNothing swaps a policy between modules and
// settings many times: the instances, pools and compiled modules held
// afterwards are those of one policy, as before the swaps.
func TestEnvironmentSwapsLeakNothing(t *testing.T) {
	f := newEnvFixture(t, nil)
	versions := []map[string]*PolicyConfig{
		f.configs("p: {module: {labels}, settings: {denied_labels: [foo]}}"),
		f.configs("p: {module: {labels}, settings: {denied_labels: [bar]}}"),
		f.configs("p: {module: {wasi-log}}"),
	}
	if err := f.env.Init(context.Background(), versions[0]); err != nil {
		t.Fatal(err)
	}
	f.answer("p", "foo")
	count := func() string {
		return fmt.Sprintf("%d pools, %d modules, %d instances", f.env.SharedRunners(), f.rt.CompiledModules(), f.rt.LiveInstances())
	}
	before := count()
	for i := 1; i <= 30; i++ {
		v := versions[i%len(versions)]
		if ch := f.env.Apply(context.Background(), v); len(ch) != 1 || ch[0].Err != nil {
			t.Fatalf("swap %d: %+v", i, ch)
		}
		f.answer("p", "foo")
	}
	if after := count(); after != before {
		t.Errorf("after 30 swaps back to the first version: %s; before: %s", after, before)
	}
}

// TestEnvironmentBuildsPoolsInParallelOnce: the pools of distinct modules
// are built before the policies (preparePools), one per module however
// many policies use it; the loader's own holds on them go when it is done,
// so that a failed Init, or the removal of every policy, leaves none.
func TestEnvironmentBuildsPoolsInParallelOnce(t *testing.T) {
	f := newEnvFixture(t, nil)
	good := "a: {module: {labels}, settings: {denied_labels: [foo]}}\n" +
		"b: {module: {labels}, settings: {denied_labels: [bar]}}\n" +
		"w: {module: {wasi-log}}\n" +
		"g: {expression: 'm()', message: 'no', policies: {m: {module: {labels}, settings: {denied_labels: [baz]}}}}\n"
	if err := f.env.Init(context.Background(), f.configs(good+"bad: {module: 'file://{dir}/missing.wasm'}\n")); err == nil {
		t.Fatal("Init with a missing module succeeded")
	}
	if n, m := f.env.SharedRunners(), f.rt.CompiledModules(); n+m != 0 {
		t.Errorf("a failed Init holds %d pools and %d modules", n, m)
	}

	if err := f.env.Init(context.Background(), f.configs(good)); err != nil {
		t.Fatal(err)
	}
	if n := f.env.SharedRunners(); n != 2 {
		t.Errorf("%d pools for two modules", n)
	}
	for id, want := range map[string]string{"a": "foo", "b": "bar"} {
		if got := f.answer(id, want); got == "accept" {
			t.Errorf("policy %s accepted a Pod labelled %s", id, want)
		}
		if got := f.answer(id, "other"); got != "accept" {
			t.Errorf("policy %s: %s", id, got)
		}
	}
	f.env.Apply(context.Background(), map[string]*PolicyConfig{})
	if n, m := f.env.SharedRunners(), f.rt.CompiledModules(); n+m != 0 {
		t.Errorf("with no policy left: %d pools and %d modules", n, m)
	}
}

// TestEnvironmentInit checks a server's start: without ContinueOnErrors one
// broken policy fails it and nothing is held; with it, the broken policy
// answers its error and the others serve.
func TestEnvironmentInit(t *testing.T) {
	f := newEnvFixture(t, nil)
	doc := "good: {module: {labels}, settings: {denied_labels: [foo]}}\nbad: {module: 'file://{dir}/missing.wasm'}\n"
	err := f.env.Init(context.Background(), f.configs(doc))
	if err == nil || !strings.Contains(err.Error(), `policy "bad"`) {
		t.Fatalf("Init = %v, want the bad policy's error", err)
	}
	if n, m := f.env.SharedRunners(), f.rt.CompiledModules(); n+m != 0 {
		t.Errorf("a failed Init holds %d pools and %d modules", n, m)
	}
	env, err := NewEnvironment(Options{Runtime: f.rt, ContinueOnErrors: true})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close(context.Background())
	if err := env.Init(context.Background(), f.configs(doc)); err != nil {
		t.Fatal(err)
	}
	if got := answerPod(env.Validate, "good", "foo"); got != "label foo is denied" {
		t.Errorf("good answers %q", got)
	}
	if got := answerPod(env.Validate, "bad", "foo"); !strings.Contains(got, "missing.wasm") {
		t.Errorf("bad answers %q, want its load error", got)
	}
	var notFound *PolicyNotFoundError
	if _, err := env.Validate(context.Background(), "nope", nil, OriginValidate); !errors.As(err, &notFound) {
		t.Errorf("an unknown policy: %v", err)
	}
}

// An alias answers with the policy it names, members included, follows
// SetAliases, and never hides an id.
func TestEnvironmentAliases(t *testing.T) {
	f := newEnvFixture(t, nil)
	// A policy server in cluster mode serves each generation of a policy
	// as <name>/<generation>, an id policies.yml cannot give.
	configs := f.configs("p1: {module: {labels}, settings: {denied_labels: [foo]}}\n" +
		"p2: {module: {labels}, settings: {denied_labels: [bar]}}\n" +
		"g1: {expression: 'm()', message: 'no', policies: {m: {module: {labels}, settings: {denied_labels: [baz]}}}}\n")
	generations := map[string]*PolicyConfig{}
	for id, c := range configs {
		generations[id[:1]+"/"+id[1:]] = c
	}
	if err := f.env.Init(context.Background(), generations); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		aliases map[string]string
		answers map[string]string // "id labels" -> answer
	}{
		{aliases: map[string]string{"p": "p/1", "g": "g/1"},
			answers: map[string]string{"p foo": "label foo is denied", "p bar": "accept", "g baz": "no", "g/m baz": "label baz is denied"}},
		{aliases: map[string]string{"p": "p/2"},
			answers: map[string]string{"p foo": "accept", "p bar": "label bar is denied", "g baz": "error: unknown policy: g"}},
		{aliases: map[string]string{"p": "p/3", "p/1": "p/2"},
			answers: map[string]string{"p bar": "error: unknown policy: p", "p/1 foo": "label foo is denied"}},
	}
	for i, s := range steps {
		f.env.SetAliases(s.aliases)
		for q, want := range s.answers {
			id, labels, _ := strings.Cut(q, " ")
			if got := f.answer(id, labels); got != want {
				t.Errorf("step %d: %s with labels %q: %q, want %q", i, id, labels, got, want)
			}
		}
	}
}

// FailedStage tells a policy server which step of a load failed.
func TestFailedStage(t *testing.T) {
	f := newEnvFixture(t, nil)
	if err := os.WriteFile(filepath.Join(f.dir, "not-wasm.wasm"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]LoadStage{
		"a: {module: 'file://{dir}/missing.wasm'}":                                                    StageFetch,
		"a: {module: 'file://{dir}/not-wasm.wasm'}":                                                   StageCompile,
		"a: {module: {labels}, settings: {denied_labels: 5}}":                                         StageSettings,
		"a: {module: builtin://cel, settings: {validations: [{expression: 'nonsense ((('}]}}":         StageSettings,
		"a: {expression: 'm()', message: 'no', policies: {m: {module: 'file://{dir}/missing.wasm'}}}": StageFetch,
	}
	for doc, want := range tests {
		changes := f.env.Apply(context.Background(), f.configs(doc+"\n"))
		if len(changes) != 1 || changes[0].Err == nil {
			t.Errorf("%s: changes %v, want one failure", doc, changes)
			continue
		}
		if got := FailedStage(changes[0].Err); got != want {
			t.Errorf("%s: stage %q of %v, want %q", doc, got, changes[0].Err, want)
		}
	}
	if got := FailedStage(errors.New("other")); got != StageOther {
		t.Errorf("FailedStage of a plain error = %q, want %q", got, StageOther)
	}
}

// nameRecorder keeps the policy_name of each evaluation recorded, and of
// each timeout.
type nameRecorder struct {
	mu       sync.Mutex
	names    []string
	timeouts []string
}

func (r *nameRecorder) RecordEvaluation(_ context.Context, e observability.Evaluation, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, e.PolicyName)
}

func (r *nameRecorder) RecordInitializationError(context.Context, string, string) {}
func (r *nameRecorder) RecordTimeout(_ context.Context, policyName string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timeouts = append(r.timeouts, policyName)
}

// An evaluation its time limit ends is recorded as a timeout, under the
// policy's name; an answer, even a rejection, is not.
func TestEnvironmentRecordsTimeouts(t *testing.T) {
	rec := &nameRecorder{}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	env, err := NewEnvironment(Options{Runtime: rt, Workers: 1, Recorder: rec, TimeoutProtection: true, DefaultTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close(context.Background()) })
	f := &envFixture{t: t, rt: rt, env: env, dir: t.TempDir()}
	configs := f.configs("loop: {module: {loop}, timeoutEvalSeconds: 1}\nlabels: {module: {labels}, settings: {denied_labels: [foo]}}\n")
	// Served as a cluster-mode replica serves generation 3.
	configs["loop/3"] = configs["loop"]
	configs["loop/3"].Name = "loop"
	delete(configs, "loop")
	if err := env.Init(context.Background(), configs); err != nil {
		t.Fatal(err)
	}
	if got := answerPod(env.Validate, "loop/3", ""); !strings.Contains(got, "exceeded the allowed execution time") {
		t.Fatalf("the loop answers %q, want its timeout", got)
	}
	if got := answerPod(env.Validate, "labels", "foo"); got != "label foo is denied" {
		t.Fatalf("labels answers %q", got)
	}
	if want := []string{"loop"}; !slices.Equal(rec.timeouts, want) {
		t.Errorf("timeouts recorded: %q, want %q", rec.timeouts, want)
	}
}

// A cluster-mode replica serves each generation under <name>/<generation>:
// the metrics name every generation, and the alias, after the policy, as
// Kubewarden's do, so a new generation starts no new series.
func TestEnvironmentMetricNames(t *testing.T) {
	rec := &nameRecorder{}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	env, err := NewEnvironment(Options{Runtime: rt, Workers: 1, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close(context.Background()) })
	cel := func(name string) *PolicyConfig {
		return &PolicyConfig{Module: NativeCELModule, Name: name,
			Settings: json.RawMessage(`{"validations":[{"expression":"true"}]}`)}
	}
	configs := map[string]*PolicyConfig{"p/1": cel("p"), "p/2": cel("p"), "standalone": cel("")}
	if err := env.Init(context.Background(), configs); err != nil {
		t.Fatal(err)
	}
	env.SetAliases(map[string]string{"p": "p/2"})
	for _, id := range []string{"p/1", "p/2", "p", "standalone"} {
		if got := answerPod(env.Validate, id, ""); got != "accept" {
			t.Fatalf("%s answers %q", id, got)
		}
	}
	if want := []string{"p", "p", "p", "standalone"}; !slices.Equal(rec.names, want) {
		t.Errorf("policy_name of p/1, p/2, the alias p and standalone: %q, want %q", rec.names, want)
	}
}
