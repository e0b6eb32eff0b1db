package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wardenhq/warden/internal/metadata"
)

// KubernetesReader reads the cluster for the Rego policies granted
// contextAwareResources, whose data holds every object of those kinds
// (compat 2.2, 2.3). hostcap.Host implements it; when the engine's
// HostCapabilities does not, the evaluations of those policies fail.
type KubernetesReader interface {
	// ListResourcesAll lists every object of a kind: a Kubernetes List.
	ListResourcesAll(ctx context.Context, apiVersion, kind string) ([]byte, error)
	// ResourcePluralName answers the plural name of a kind (v1/Service:
	// "services"), as a JSON string.
	ResourcePluralName(ctx context.Context, apiVersion, kind string) ([]byte, error)
}

// KubernetesChanges tells whether the objects of a kind changed since a
// time. A KubernetesReader that implements it (hostcap.Host, when the
// kind has a reflector) lets a Rego policy's data be kept between
// evaluations until the cluster changes, as Kubewarden keeps the Gatekeeper
// inventory. tracked is false when the reader cannot tell.
type KubernetesChanges interface {
	ListsChangedSince(apiVersion, kind string, since time.Time) (changed, tracked bool)
}

// Kubewarden's messages for a context that cannot be built (its
// RegoRuntimeError); the evaluation is rejected with them, code 500.
const (
	msgNoCallback        = "cannot build Rego context aware data: callback channel is not set"
	msgCallbackFailed    = "cannot perform a request via callback channel: "
	msgBadList           = "cannot convert callback response into a list of kubernetes objects: "
	msgBadPluralName     = "get plural name failure, cannot convert callback response: "
	msgObjectNoName      = "DynamicObject does not have a name"
	msgNamespacedInAll   = "trying to add a namespaced resource to a list of clusterwide resources"
	msgClusterwideInNS   = "trying to add a clusterwide resource to a list of namespaced resources"
	msgKubernetesSetting = "OPA policy had user provided setting with key `kubernetes`. This value has been overwritten with the actual kubernetes context data"
)

// regoContext builds, before each evaluation of a Rego policy granted
// contextAwareResources, the data it reads about the cluster, as
// Kubewarden does:
//
//   - opa mode: the settings, with data.kubernetes.<plural>.<namespace>.<name>
//     (cluster-scoped kinds: .<plural>.<name>) in place of any setting
//     named kubernetes;
//   - gatekeeper mode: data.inventory.cluster.<apiVersion>.<Kind>.<name>
//     and data.inventory.namespace.<namespace>.<apiVersion>.<Kind>.<name>.
//
// The data is kept while the reader tells that none of the kinds changed
// (KubernetesChanges); otherwise every evaluation lists them afresh.
type regoContext struct {
	resources []ContextAwareResource // by apiVersion, then kind, as Kubewarden asks for them
	reader    KubernetesReader       // nil: no way to read the cluster
	changes   KubernetesChanges      // nil: the reader cannot tell
	logger    *slog.Logger

	mu       sync.Mutex
	kept     []byte    // the data of the last evaluation
	keptFrom time.Time // when its lists began
}

// newRegoContext returns the context of a policy granted resources, or nil
// when it was granted none.
func newRegoContext(resources []ContextAwareResource, caps HostCapabilities, logger *slog.Logger) *regoContext {
	if len(resources) == 0 {
		return nil
	}
	rs := slices.Clone(resources)
	slices.SortFunc(rs, func(a, b ContextAwareResource) int {
		if c := strings.Compare(a.APIVersion, b.APIVersion); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	reader, _ := caps.(KubernetesReader)
	changes, _ := caps.(KubernetesChanges)
	return &regoContext{resources: slices.Compact(rs), reader: reader, changes: changes, logger: logger}
}

// contextError fails an evaluation with its message as it is, code 500,
// where other errors get "internal server error: " before theirs.
type contextError struct{ msg string }

func (e *contextError) Error() string { return e.msg }

// object is one object of a list, with what places it in the data.
type object struct {
	name, namespace *string
	raw             json.RawMessage
}

// list lists every object of a kind.
func (rc *regoContext) list(ctx context.Context, r ContextAwareResource) ([]object, error) {
	out, err := rc.reader.ListResourcesAll(ctx, r.APIVersion, r.Kind)
	if err != nil {
		return nil, &contextError{msgCallbackFailed + err.Error()}
	}
	var list struct {
		Items *[]json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, &contextError{msgBadList + err.Error()}
	}
	if list.Items == nil {
		return nil, &contextError{msgBadList + "missing field `items`"}
	}
	objects := make([]object, len(*list.Items))
	for i, raw := range *list.Items {
		var o struct {
			Metadata struct {
				Name      *string `json:"name"`
				Namespace *string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, &contextError{msgBadList + err.Error()}
		}
		if o.Metadata.Name == nil {
			return nil, &contextError{msgObjectNoName}
		}
		objects[i] = object{name: o.Metadata.Name, namespace: o.Metadata.Namespace, raw: raw}
	}
	return objects, nil
}

// lists lists every object of every kind, in the order of rc.resources.
func (rc *regoContext) lists(ctx context.Context) ([][]object, error) {
	if rc.reader == nil {
		return nil, &contextError{msgNoCallback}
	}
	all := make([][]object, len(rc.resources))
	for i, r := range rc.resources {
		objects, err := rc.list(ctx, r)
		if err != nil {
			return nil, err
		}
		all[i] = objects
	}
	return all, nil
}

// data returns the data document of one evaluation in mode.
func (rc *regoContext) data(ctx context.Context, mode string, settings json.RawMessage) ([]byte, error) {
	rc.mu.Lock()
	kept, from := rc.kept, rc.keptFrom
	rc.mu.Unlock()
	if kept != nil && !rc.changedSince(from) {
		return kept, nil
	}
	start := time.Now()
	data, err := rc.build(ctx, mode, settings)
	if err != nil {
		return nil, err
	}
	if rc.changes != nil {
		rc.mu.Lock()
		if start.After(rc.keptFrom) {
			rc.kept, rc.keptFrom = data, start
		}
		rc.mu.Unlock()
	}
	return data, nil
}

// changedSince reports whether any of the kinds may have changed since.
func (rc *regoContext) changedSince(since time.Time) bool {
	if rc.changes == nil {
		return true
	}
	for _, r := range rc.resources {
		if changed, tracked := rc.changes.ListsChangedSince(r.APIVersion, r.Kind, since); changed || !tracked {
			return true
		}
	}
	return false
}

// build lists the kinds and builds the data from them.
func (rc *regoContext) build(ctx context.Context, mode string, settings json.RawMessage) ([]byte, error) {
	lists, err := rc.lists(ctx)
	if err != nil {
		return nil, err
	}
	if mode == metadata.ModeGatekeeper {
		return json.Marshal(map[string]any{"inventory": rc.gatekeeperInventory(lists)})
	}
	inventory, err := rc.opaInventory(ctx, lists)
	if err != nil {
		return nil, err
	}
	data := map[string]json.RawMessage{}
	if !isNull(settings) {
		if err := json.Unmarshal(settings, &data); err != nil {
			return nil, fmt.Errorf("reading the settings: %w", err)
		}
	}
	if _, ok := data["kubernetes"]; ok {
		rc.logger.WarnContext(ctx, msgKubernetesSetting)
	}
	if data["kubernetes"], err = json.Marshal(inventory); err != nil {
		return nil, err
	}
	return json.Marshal(data)
}

// byName holds objects by name.
type byName map[string]json.RawMessage

// gatekeeperInventory places the objects by scope, apiVersion, kind and
// name: {"cluster": {...}, "namespace": {<namespace>: {...}}}.
func (rc *regoContext) gatekeeperInventory(lists [][]object) any {
	type byKind map[string]byName
	type byAPIVersion map[string]byKind
	cluster, namespaced := byAPIVersion{}, map[string]byAPIVersion{}
	for i, objects := range lists {
		r := rc.resources[i]
		for _, o := range objects {
			versions := cluster
			if o.namespace != nil {
				if versions = namespaced[*o.namespace]; versions == nil {
					versions = byAPIVersion{}
					namespaced[*o.namespace] = versions
				}
			}
			kinds := versions[r.APIVersion]
			if kinds == nil {
				kinds = byKind{}
				versions[r.APIVersion] = kinds
			}
			if kinds[r.Kind] == nil {
				kinds[r.Kind] = byName{}
			}
			kinds[r.Kind][*o.name] = o.raw
		}
	}
	return map[string]any{"cluster": cluster, "namespace": namespaced}
}

// opaInventory places the objects by plural name, namespace if they have
// one, and name. A plural that has no object is absent, as in Kubewarden.
func (rc *regoContext) opaInventory(ctx context.Context, lists [][]object) (map[string]any, error) {
	plurals := make([]string, len(rc.resources))
	for i, r := range rc.resources {
		out, err := rc.reader.ResourcePluralName(ctx, r.APIVersion, r.Kind)
		if err != nil {
			return nil, &contextError{msgCallbackFailed + err.Error()}
		}
		if err := json.Unmarshal(out, &plurals[i]); err != nil {
			return nil, &contextError{msgBadPluralName + err.Error()}
		}
	}
	inventory := map[string]any{}
	for i, objects := range lists {
		for _, o := range objects {
			switch scope := inventory[plurals[i]].(type) {
			case nil:
				if o.namespace == nil {
					inventory[plurals[i]] = byName{*o.name: o.raw}
				} else {
					inventory[plurals[i]] = map[string]byName{*o.namespace: {*o.name: o.raw}}
				}
			case byName:
				if o.namespace != nil {
					return nil, &contextError{msgNamespacedInAll}
				}
				scope[*o.name] = o.raw
			case map[string]byName:
				if o.namespace == nil {
					return nil, &contextError{msgClusterwideInNS}
				}
				if scope[*o.namespace] == nil {
					scope[*o.namespace] = byName{}
				}
				scope[*o.namespace][*o.name] = o.raw
			}
		}
	}
	return inventory, nil
}

// asContextError reports whether err is a context that could not be built.
func asContextError(err error) (*contextError, bool) {
	var ce *contextError
	ok := errors.As(err, &ce)
	return ce, ok
}
