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
	"github.com/wardenhq/warden/internal/wasm"
)

// KubernetesReader reads the cluster for the Rego policies granted
// contextAwareResources, whose data holds every object of those kinds
// (docs/compatibility.md#opa-mode, docs/compatibility.md#gatekeeper-mode).
// hostcap.Host implements it; when the engine's HostCapabilities does not, the
// evaluations of those policies fail.
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

// regoContext gives, before each evaluation of a Rego policy granted
// contextAwareResources, the data it reads about the cluster, as Kubewarden
// does:
//
//   - opa mode: the settings, with data.kubernetes.<plural>.<namespace>.<name>
//     (cluster-scoped kinds: .<plural>.<name>) in place of any setting
//     named kubernetes;
//   - gatekeeper mode: data.inventory.cluster.<apiVersion>.<Kind>.<name>
//     and data.inventory.namespace.<namespace>.<apiVersion>.<Kind>.<name>.
//
// The objects come from an inventory that the policies granted the same
// kinds in the same mode share (inventory.go). It is safe for concurrent
// use.
type regoContext struct {
	shared   *regoInventories
	inv      *inventory
	mode     string
	settings json.RawMessage
	logger   *slog.Logger

	mu     sync.Mutex
	of     uint64       // opa mode: the version of the inventory in data
	merged wasm.OPAData // opa mode: the settings merged with it
}

// newRegoContext returns the context of a policy granted resources in mode
// (its settings: settings), or nil when it was granted none. Its inventory
// is shared through shared (nil: one of its own) and read through caps; the
// context holds it until close.
func newRegoContext(shared *regoInventories, resources []ContextAwareResource, mode string, settings json.RawMessage,
	caps HostCapabilities, logger *slog.Logger) *regoContext {
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
	if shared == nil {
		shared = &regoInventories{}
	}
	return &regoContext{
		shared:   shared,
		inv:      shared.acquire(mode, slices.Compact(rs), caps),
		mode:     mode,
		settings: settings,
		logger:   logger,
	}
}

// close drops the context's hold on its inventory.
func (rc *regoContext) close() { rc.shared.release(rc.inv) }

// contextError fails an evaluation with its message as it is, code 500,
// where other errors get "internal server error: " before theirs.
type contextError struct{ msg string }

func (e *contextError) Error() string { return e.msg }

// data returns the data document of one evaluation. Its version changes
// only when the inventory's does.
func (rc *regoContext) data(ctx context.Context) (wasm.OPAData, error) {
	inv, err := rc.inv.data(ctx)
	if err != nil || rc.mode == metadata.ModeGatekeeper {
		return inv, err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if inv.ID() == rc.of {
		return rc.merged, nil
	}
	b, overwritten, err := opaData(rc.settings, inv.JSON())
	if err != nil {
		return wasm.OPAData{}, fmt.Errorf("reading the settings: %w", err)
	}
	if overwritten {
		rc.logger.WarnContext(ctx, msgKubernetesSetting)
	}
	merged := wasm.NewOPAData(b)
	if inv.ID() > rc.of { // versions of one inventory increase
		rc.of, rc.merged = inv.ID(), merged
	}
	return merged, nil
}

// asContextError reports whether err is a context that could not be built.
func asContextError(err error) (*contextError, bool) {
	var ce *contextError
	ok := errors.As(err, &ce)
	return ce, ok
}
