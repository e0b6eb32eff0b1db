package hostcap

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestNoKubernetes checks Kubewarden's answer when there is no cluster.
func TestNoKubernetes(t *testing.T) {
	d := NewDirect(Options{})
	for op, payload := range map[string]any{
		"get_resource":                map[string]any{"api_version": "v1", "kind": "Namespace", "name": "a", "disable_cache": false},
		"list_resources_all":          map[string]any{"api_version": "v1", "kind": "Namespace"},
		"list_resources_by_namespace": map[string]any{"api_version": "v1", "kind": "Pod", "namespace": "a"},
		"can_i": map[string]any{"subject_access_review": map[string]any{"user": "u",
			"resource_attributes": map[string]any{"verb": "get", "resource": "pods"}}, "disable_cache": false},
	} {
		if got := call(t, d, "kubernetes", op, payload); got != "error: Callback evaluation failure: kube::Client was not initialized properly" {
			t.Errorf("%s: %s", op, got)
		}
	}
}

func TestDNSLookup(t *testing.T) {
	got := call(t, NewDirect(Options{}), "net", "v1/dns_lookup_host", "localhost")
	var a struct{ IPs []string }
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	found := false
	for _, ip := range a.IPs {
		found = found || ip == "127.0.0.1" || ip == "::1"
	}
	if !found {
		t.Errorf("localhost is %v", a.IPs)
	}
	if got := call(t, NewDirect(Options{}), "net", "v1/dns_lookup_host", "no-such-host.invalid"); !strings.HasPrefix(got, "error: Callback evaluation failure: failed to lookup address information: ") {
		t.Errorf("unknown host: %s", got)
	}
}

// TestFieldMasks prunes objects as Kubewarden's field masks do.
func TestFieldMasks(t *testing.T) {
	obj := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},
		"spec":{"containers":[{"name":"c","image":"nginx","ports":[{"containerPort":80,"name":"http"}]},{"name":"d","image":"redis"}],"nodeName":"n"},
		"status":{"phase":"Running"}}`
	tests := []struct {
		name  string
		masks []string
		want  string
	}{
		{name: "none", masks: nil, want: obj},
		{name: "empty keeps all", masks: []string{}, want: obj},
		{name: "arrays are traversed", masks: []string{"spec.containers.image"},
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"image":"nginx"},{"image":"redis"}]}}`},
		{name: "a leaf keeps its subtree", masks: []string{"spec.containers", "status.phase"},
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"nginx","ports":[{"containerPort":80,"name":"http"}]},{"name":"d","image":"redis"}]},"status":{"phase":"Running"}}`},
		{name: "metadata is always kept", masks: []string{"metadata.name"},
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}}}`},
		{name: "nested arrays", masks: []string{"spec.containers.ports.containerPort"},
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"ports":[{"containerPort":80}]},{}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want map[string]any
			if err := json.Unmarshal([]byte(obj), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			newMask(tt.masks).prune(got)
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				t.Errorf("got %s\nwant %s", g, tt.want)
			}
		})
	}
}

// TestTTLCache checks expiry and pruning with a settable clock.
func TestTTLCache(t *testing.T) {
	c := &clock{t: time.Now()}
	cache := newTTLCache(5*time.Second, c.now)
	calls := 0
	fill := func() ([]byte, error) { calls++; return []byte{byte(calls)}, nil }
	get := func(key string) byte {
		b, err := cache.get(key, fill)
		if err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	if first, again := get("a"), get("a"); first != 1 || again != 1 {
		t.Fatal("not cached")
	}
	c.t = c.t.Add(5 * time.Second)
	if get("a") != 2 {
		t.Fatal("not expired after the TTL")
	}
	if _, err := cache.get("b", func() ([]byte, error) { return nil, errors.New("boom") }); err == nil {
		t.Fatal("error lost")
	}
	if get("b") != 3 {
		t.Fatal("a failure was cached")
	}
	for i := range 2 * minPruneSize {
		get(string(rune('c' + i)))
		c.t = c.t.Add(time.Second)
	}
	if n := len(cache.entries); n > minPruneSize+5 {
		t.Errorf("%d entries kept, expired ones are not pruned", n)
	}
}
