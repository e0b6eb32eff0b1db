package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/wasm"
)

// regoInventories shares the cluster data of the Rego policies of an
// Environment: the policies granted the same kinds in the same mode read one
// inventory, listed and built once per change of the cluster however many
// they are. An inventory lives while a policy holds it. The zero value is
// ready to use; it is safe for concurrent use.
type regoInventories struct {
	mu    sync.Mutex
	byKey map[string]*inventory
}

// acquire returns the inventory of resources (sorted, without duplicates)
// in mode, read through caps, for the caller to release. caps is the same
// for every policy of an Environment, so it is not part of the key.
func (s *regoInventories) acquire(mode string, resources []ContextAwareResource, caps HostCapabilities) *inventory {
	var key strings.Builder
	key.WriteString(mode)
	for _, r := range resources {
		key.WriteString("\x00" + r.APIVersion + "\x00" + r.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv := s.byKey[key.String()]; inv != nil {
		inv.refs++
		return inv
	}
	reader, _ := caps.(KubernetesReader)
	changes, _ := caps.(KubernetesChanges)
	inv := &inventory{key: key.String(), mode: mode, resources: resources, reader: reader, changes: changes, refs: 1}
	if s.byKey == nil {
		s.byKey = map[string]*inventory{}
	}
	s.byKey[inv.key] = inv
	return inv
}

// release drops a hold that acquire returned; the last one frees the
// inventory.
func (s *regoInventories) release(inv *inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv.refs--; inv.refs == 0 {
		delete(s.byKey, inv.key)
	}
}

// inventory is the objects of some kinds, as Rego policies in one mode read
// them: in gatekeeper mode the whole data document, {"inventory": ...}; in
// opa mode the value of data.kubernetes, which each policy merges into its
// settings (regoContext).
//
// It is kept while the reader tells that none of the kinds changed
// (KubernetesChanges); otherwise every evaluation lists them afresh. Either
// way its version, a wasm.OPAData, changes only when its bytes do, so the
// OPA instances that loaded it parse it again only then.
type inventory struct {
	key       string
	mode      string
	resources []ContextAwareResource // by apiVersion, then kind, as Kubewarden asks for them
	reader    KubernetesReader       // nil: no way to read the cluster
	changes   KubernetesChanges      // nil: the reader cannot tell
	refs      int                    // holders; guarded by regoInventories.mu

	buildMu  sync.Mutex // held by the build of tracked kinds, which waiters then share
	mu       sync.Mutex
	kept     wasm.OPAData // the last version built; zero before the first
	keptFrom time.Time    // when its lists began
}

// data returns the inventory as of now.
func (inv *inventory) data(ctx context.Context) (wasm.OPAData, error) {
	d, fresh, tracked := inv.current()
	if fresh {
		return d, nil
	}
	if tracked {
		// The evaluations that find the inventory stale after a change
		// wait for one build, and share it.
		inv.buildMu.Lock()
		defer inv.buildMu.Unlock()
		if d, fresh, _ = inv.current(); fresh {
			return d, nil
		}
	}
	start := time.Now()
	b, err := inv.build(ctx)
	if err != nil {
		return wasm.OPAData{}, err
	}
	return inv.keep(b, start), nil
}

// current returns the version kept, whether it is fresh (none of the kinds
// changed since its lists began), and whether the reader tracks the changes
// of every kind.
func (inv *inventory) current() (d wasm.OPAData, fresh, tracked bool) {
	inv.mu.Lock()
	d, from := inv.kept, inv.keptFrom
	inv.mu.Unlock()
	if inv.changes == nil {
		return d, false, false
	}
	changed := false
	for _, r := range inv.resources {
		c, t := inv.changes.ListsChangedSince(r.APIVersion, r.Kind, from)
		if !t {
			return d, false, false
		}
		changed = changed || c
	}
	return d, d.ID() != 0 && !changed, true
}

// keep returns b, built from lists that began at start, as a version: the
// one kept when the bytes are the same, a new one otherwise. The newest
// build is kept.
func (inv *inventory) keep(b []byte, start time.Time) wasm.OPAData {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	d := inv.kept
	if d.ID() == 0 || !bytes.Equal(d.JSON(), b) {
		d = wasm.NewOPAData(b)
	}
	if start.After(inv.keptFrom) {
		inv.kept, inv.keptFrom = d, start
	}
	return d
}

// build lists the kinds and builds the inventory from them.
func (inv *inventory) build(ctx context.Context) ([]byte, error) {
	lists, err := inv.lists(ctx)
	if err != nil {
		return nil, err
	}
	if inv.mode == metadata.ModeGatekeeper {
		return gatekeeperData(inv.resources, lists), nil
	}
	plurals, err := inv.plurals(ctx)
	if err != nil {
		return nil, err
	}
	return opaInventory(plurals, lists)
}

// object is one object of a list, with what places it in the data.
type object struct {
	name, namespace *string
	raw             json.RawMessage
}

// lists lists every object of every kind, in the order of inv.resources.
func (inv *inventory) lists(ctx context.Context) ([][]object, error) {
	if inv.reader == nil {
		return nil, &contextError{msgNoCallback}
	}
	all := make([][]object, len(inv.resources))
	for i, r := range inv.resources {
		objects, err := inv.list(ctx, r)
		if err != nil {
			return nil, err
		}
		all[i] = objects
	}
	return all, nil
}

// list lists every object of a kind.
func (inv *inventory) list(ctx context.Context, r ContextAwareResource) ([]object, error) {
	out, err := inv.reader.ListResourcesAll(ctx, r.APIVersion, r.Kind)
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

// plurals asks the plural name of every kind, in the order of
// inv.resources.
func (inv *inventory) plurals(ctx context.Context) ([]string, error) {
	plurals := make([]string, len(inv.resources))
	for i, r := range inv.resources {
		out, err := inv.reader.ResourcePluralName(ctx, r.APIVersion, r.Kind)
		if err != nil {
			return nil, &contextError{msgCallbackFailed + err.Error()}
		}
		if err := json.Unmarshal(out, &plurals[i]); err != nil {
			return nil, &contextError{msgBadPluralName + err.Error()}
		}
	}
	return plurals, nil
}

// gatekeeperData places the objects by scope, apiVersion, kind and name:
// {"inventory": {"cluster": {...}, "namespace": {<namespace>: {...}}}}.
func gatekeeperData(resources []ContextAwareResource, lists [][]object) []byte {
	var cluster, namespaced []leaf
	size := 0
	for i, objects := range lists {
		r := resources[i]
		for _, o := range objects {
			if o.namespace == nil {
				cluster = append(cluster, leaf{[]string{r.APIVersion, r.Kind, *o.name}, o.raw})
			} else {
				namespaced = append(namespaced, leaf{[]string{*o.namespace, r.APIVersion, r.Kind, *o.name}, o.raw})
			}
			size += len(o.raw) + len(*o.name) + 4
		}
	}
	b := make([]byte, 0, size+64)
	b = append(b, `{"inventory":{"cluster":`...)
	b = appendTree(b, cluster)
	b = append(b, `,"namespace":`...)
	b = appendTree(b, namespaced)
	return append(b, "}}"...)
}

// opaInventory places the objects by plural name, namespace if they have
// one, and name. A plural that has no object is absent, as in Kubewarden;
// so are kinds of both scopes under one plural.
func opaInventory(plurals []string, lists [][]object) ([]byte, error) {
	namespaced := map[string]bool{} // by plural, as its first object says
	var leaves []leaf
	size := 0
	for i, objects := range lists {
		p := plurals[i]
		for _, o := range objects {
			ns, seen := namespaced[p]
			switch {
			case !seen:
				namespaced[p] = o.namespace != nil
			case !ns && o.namespace != nil:
				return nil, &contextError{msgNamespacedInAll}
			case ns && o.namespace == nil:
				return nil, &contextError{msgClusterwideInNS}
			}
			if o.namespace == nil {
				leaves = append(leaves, leaf{[]string{p, *o.name}, o.raw})
			} else {
				leaves = append(leaves, leaf{[]string{p, *o.namespace, *o.name}, o.raw})
			}
			size += len(o.raw) + len(*o.name) + 4
		}
	}
	return appendTree(make([]byte, 0, size+2), leaves), nil
}

// leaf is a JSON value and its place in a tree of objects: the keys that
// lead to it.
type leaf struct {
	path []string
	raw  json.RawMessage
}

// appendTree appends leaves as nested JSON objects, keys sorted as
// json.Marshal sorts them, each value as it is: neither parsed nor
// compacted again. Of leaves with the same path the last wins, as in a map
// filled in their order. No path may be a proper prefix of another.
func appendTree(b []byte, leaves []leaf) []byte {
	slices.SortStableFunc(leaves, func(x, y leaf) int { return slices.Compare(x.path, y.path) })
	b = append(b, '{')
	var prev []string
	for i, l := range leaves {
		if i+1 < len(leaves) && slices.Equal(l.path, leaves[i+1].path) {
			continue // a later leaf takes its place
		}
		common := 0
		if prev != nil {
			for common < min(len(prev), len(l.path)) && prev[common] == l.path[common] {
				common++
			}
			for range len(prev) - 1 - common {
				b = append(b, '}')
			}
			b = append(b, ',')
		}
		for j, key := range l.path[common:] {
			if j > 0 {
				b = append(b, '{')
			}
			b = appendJSONString(b, key)
			b = append(b, ':')
		}
		b = append(b, l.raw...)
		prev = l.path
	}
	for range len(prev) - 1 {
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// opaData is the data document of an opa-mode policy: its settings (null:
// none) with kubernetes, the inventory, in place of any setting of that
// name. It reports whether there was one.
func opaData(settings json.RawMessage, kubernetes []byte) (data []byte, overwritten bool, err error) {
	fields := map[string]json.RawMessage{}
	if !isNull(settings) {
		if err := json.Unmarshal(settings, &fields); err != nil {
			return nil, false, err
		}
	}
	_, overwritten = fields["kubernetes"]
	fields["kubernetes"] = kubernetes
	leaves := make([]leaf, 0, len(fields))
	size := 0
	for key, value := range fields {
		leaves = append(leaves, leaf{[]string{key}, value})
		size += len(key) + len(value) + 4
	}
	return appendTree(make([]byte, 0, size+2), leaves), overwritten, nil
}
