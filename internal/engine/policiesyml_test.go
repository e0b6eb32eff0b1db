package engine

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/wasm"
)

// TestParsePoliciesRefusesDangerousValues covers values that policies.yml
// used to accept silently: each is refused, naming the key by its path.
func TestParsePoliciesRefusesDangerousValues(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{
			name:    "a timeout that overflows a duration",
			doc:     "pod-privileged:\n  module: file:///a.wasm\n  timeoutEvalSeconds: 9300000000\n",
			wantErr: "pod-privileged.timeoutEvalSeconds: must be at most 3600 (seconds), not 9300000000",
		},
		{
			name:    "a member's timeout past the maximum",
			doc:     `g: {expression: "a()", message: m, policies: {a: {module: "file:///a", timeoutEvalSeconds: 3601}}}`,
			wantErr: "g.policies.a.timeoutEvalSeconds: must be at most 3600 (seconds), not 3601",
		},
		{
			name:    "a timeout no integer holds",
			doc:     `a: {module: "file:///a", timeoutEvalSeconds: 1e30}`,
			wantErr: "a.timeoutEvalSeconds: want an integer, not number 1e+30",
		},
		{
			name:    "a fractional timeout",
			doc:     `a: {module: "file:///a", timeoutEvalSeconds: 2.5}`,
			wantErr: "a.timeoutEvalSeconds: want an integer, not number 2.5",
		},
		{
			name:    "a member's timeout that is a string",
			doc:     `g: {expression: "a()", message: m, policies: {a: {module: "file:///a", timeoutEvalSeconds: "3"}}}`,
			wantErr: "g.policies.a.timeoutEvalSeconds: want an integer, not string",
		},
		{
			name:    "a duplicated id",
			doc:     "pod-privileged:\n  module: file:///a.wasm\nother:\n  module: file:///b.wasm\npod-privileged:\n  module: file:///c.wasm\n",
			wantErr: "policy id pod-privileged is defined twice, at lines 1 and 5",
		},
		{
			name:    "a duplicated id in JSON",
			doc:     `{"a": {"module": "file:///a.wasm"}, "a": {"module": "file:///b.wasm"}}`,
			wantErr: "policy id a is defined twice, at lines 1 and 1",
		},
		{
			name:    "a duplicated key of an entry",
			doc:     "a:\n  module: file:///a.wasm\n  policyMode: monitor\n  policyMode: protect\n",
			wantErr: "a.policyMode: defined twice, at lines 3 and 4",
		},
		{
			name:    "a duplicated key in settings",
			doc:     "a:\n  module: file:///a.wasm\n  settings:\n    denied: [x]\n    list:\n    - {k: 1, k: 2}\n",
			wantErr: "a.settings.list[0].k: defined twice, at lines 6 and 6",
		},
		{
			name:    "a duplicated group member",
			doc:     "g:\n  expression: a()\n  message: m\n  policies:\n    a: {module: file:///a}\n    a: {module: file:///b}\n",
			wantErr: "g.policies.a: defined twice, at lines 5 and 6",
		},
		{
			name:    "settings that are a string",
			doc:     `a: {module: "file:///a", settings: "str"}`,
			wantErr: "a.settings: must be a mapping, not a string",
		},
		{
			name:    "settings that are a list",
			doc:     `a: {module: "file:///a", settings: [1]}`,
			wantErr: "a.settings: must be a mapping, not a list",
		},
		{
			name:    "a member's settings that are a number",
			doc:     `g: {expression: "a()", message: m, policies: {a: {module: "file:///a", settings: 3}}}`,
			wantErr: "g.policies.a.settings: must be a mapping, not a number",
		},
		{
			name:    "a member's unknown key",
			doc:     `g: {expression: "a()", message: m, policies: {a: {module: "file:///a", settingz: {}}}}`,
			wantErr: "g.policies.a.settingz: unknown key of a group member",
		},
		{
			name:    "an id that needs quoting",
			doc:     `"a.b": {module: "file:///a", timeoutEvalSeconds: 0}`,
			wantErr: `"a.b".timeoutEvalSeconds: must be positive, not 0`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicies([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParsePolicies = %v, %v; want an error containing %q", got, err, tt.wantErr)
			}
		})
	}
}

// TestParsePoliciesIgnoredKeys checks that a key policies.yml does not
// define is ignored, as Kubewarden ignores it, and listed by its path.
func TestParsePoliciesIgnoredKeys(t *testing.T) {
	tests := []struct {
		name        string
		doc         string
		wantIgnored map[string][]string
	}{
		{
			name:        "a misspelled key",
			doc:         "pod-privileged:\n  module: file:///a.wasm\n  settingz: {a: 1}\n  timeoutEvalSecond: 3\n",
			wantIgnored: map[string][]string{"pod-privileged": {"pod-privileged.settingz", "pod-privileged.timeoutEvalSecond"}},
		},
		{
			name:        "the controller's namespacedName and every known key",
			doc:         "a: {module: file:///a, policyMode: monitor, allowedToMutate: true, settings: {}, contextAwareResources: [], message: m, timeoutEvalSeconds: 3600, hostCapabilities: [], namespacedName: {name: a}}\n",
			wantIgnored: map[string][]string{},
		},
		{
			name:        "a merge key, and a key it brings",
			doc:         "a: &a\n  module: file:///a.wasm\n  settings: {x: 1}\n  extra: 1\nb:\n  <<: *a\n  policyMode: monitor\n",
			wantIgnored: map[string][]string{"a": {"a.extra"}, "b": {"b.extra"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicies([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			for id, c := range got {
				if want := tt.wantIgnored[id]; !slices.Equal(c.IgnoredKeys, want) {
					t.Errorf("%s: IgnoredKeys = %q, want %q", id, c.IgnoredKeys, want)
				}
			}
		})
	}
	got, err := ParsePolicies([]byte("a:\n  module: file:///a.wasm\n  settingz: {a: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got["a"].Settings) != 0 {
		t.Errorf("settings = %s, want none: settingz is not settings", got["a"].Settings)
	}
}

// TestIgnoredKeysAreLogged checks that loading a policy warns about the keys
// its entry has that policies.yml does not define, at start and when a
// reload brings a new one.
func TestIgnoredKeysAreLogged(t *testing.T) {
	rt, err := wasm.NewRuntime(context.Background(), wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	var logs logtest.Buffer
	env, err := NewEnvironment(Options{Runtime: rt, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close(context.Background()) })
	const cel = "module: builtin://cel\n  settings: {validations: [{expression: 'true', message: m}]}\n"
	parse := func(doc string) map[string]*PolicyConfig {
		t.Helper()
		configs, err := ParsePolicies([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return configs
	}

	if err := env.Init(context.Background(), parse("a:\n  "+cel+"  mesage: typo\n")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "config_key=a.mesage") {
		t.Errorf("no warning about a.mesage at start; log:\n%s", logs.String())
	}
	logs.Reset()
	changes := env.Apply(context.Background(), parse("a:\n  "+cel+"  mesage: typo\n  policyMod: monitor\n"))
	if len(changes) != 1 || changes[0].Err != nil {
		t.Fatalf("changes = %+v, want a's update", changes)
	}
	if !strings.Contains(logs.String(), "config_key=a.policyMod") {
		t.Errorf("no warning about a.policyMod after the reload; log:\n%s", logs.String())
	}
}
