package hostcap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/wardenhq/warden/internal/reflector"
)

// KubernetesOptions configure NewKubernetes.
type KubernetesOptions struct {
	// Now is the clock of the get_resource and can_i caches; nil means
	// time.Now.
	Now func() time.Time
	// Store, when set, keeps the objects of the kinds listed (RFC 004),
	// and lists are answered from it.
	Store *reflector.Store
	// Reflectors tune the reflectors that fill Store.
	Reflectors reflector.Options
	// Logger receives the reflectors' news; nil discards it.
	Logger *slog.Logger
}

// Kubernetes answers the kubernetes host capabilities from an API server:
// get_resource (GET), list_resources_by_namespace and list_resources_all
// (LIST, paginated) through the dynamic client, kinds resolved to resources
// by discovery (a RESTMapper, refreshed when a kind is not found, at most
// every 10 s), and can_i (a SubjectAccessReview); and, for the data of Rego
// policies, the plural names of kinds.
//
// With a Store, lists are answered from reflectors: a copy of each kind's
// objects, kept in the SQLite store of RFC 004 by a list-and-watch of the
// API server (internal/reflector), with selectors evaluated on the copies;
// an answer is assembled from the objects' stored JSON and kept until the
// kind changes (listCache). get_resource of a kind with a reflector reads
// it too, unless disable_cache. Reflect starts a kind's reflector ahead of
// its first list, which would otherwise start it. Without a Store, lists
// are direct calls to the API server. Either way the items lose their managedFields and
// last-applied-configuration annotation, as a Kubewarden reflector's do.
// get_resource and can_i answers are cached 5 s unless the request sets
// disable_cache.
// Field masks keep, of everything but apiVersion, kind and metadata, only
// the fields they name (arrays are traversed).
//
// Safe for concurrent use.
type Kubernetes struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	sar     authorizationv1client.SubjectAccessReviewInterface
	gets    *ttlCache
	canI    *ttlCache

	resetMu   sync.Mutex
	lastReset time.Time

	reflectors *reflector.Reflectors // nil: no store
	lists      *listCache            // of the answers read from reflectors

	pendingMu sync.Mutex
	pending   map[schema.GroupVersionKind]error // kinds Reflect could not resolve, and why
	retrying  bool                              // retryPending runs
	retryNow  chan struct{}                     // ReflectorsSettled asks retryPending for a try without waiting
	closed    chan struct{}                     // closed by Close: retryPending ends
	closeOnce sync.Once
	// retryFirst and retryMax are the backoff of retryPending:
	// pendingRetryFirst and pendingRetryMax, shorter in tests.
	retryFirst, retryMax time.Duration
}

// The backoff of retryPending: the first retry of a kind that could not be
// resolved comes after pendingRetryFirst, each next one twice as late, at
// most pendingRetryMax.
const (
	pendingRetryFirst = 500 * time.Millisecond
	pendingRetryMax   = 30 * time.Second
)

// Kubewarden's cache time of get_resource and can_i.
const kubeCacheTTL = 5 * time.Second

// mapperResetInterval bounds how often discovery is refreshed because a
// kind was not found.
const mapperResetInterval = 10 * time.Second

// listPageSize is the page size of list calls.
const listPageSize = 500

// NewKubernetes returns a Kubernetes for the API server of cfg. It connects
// to nothing until asked. Unless cfg sets a rate limit, client-side rate
// limiting is off, as in Kubewarden (the API server's priority and
// fairness applies).
func NewKubernetes(cfg *rest.Config, opts KubernetesOptions) (*Kubernetes, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "warden"
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes discovery client: %w", err)
	}
	authz, err := authorizationv1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes authorization client: %w", err)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var refl *reflector.Reflectors
	if opts.Store != nil {
		if refl, err = reflector.New(opts.Store, cfg, opts.Logger, opts.Reflectors); err != nil {
			return nil, err
		}
	}
	return &Kubernetes{
		reflectors: refl,
		lists:      newListCache(maxListCacheBytes),
		pending:    map[schema.GroupVersionKind]error{},
		retryNow:   make(chan struct{}, 1),
		closed:     make(chan struct{}),
		retryFirst: pendingRetryFirst,
		retryMax:   pendingRetryMax,
		dynamic:    dyn,
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		sar:        authz.SubjectAccessReviews(),
		gets:       newTTLCache(kubeCacheTTL, now),
		canI:       newTTLCache(kubeCacheTTL, now),
	}, nil
}

// Reflect starts keeping a copy of the objects of a kind, unless it is
// kept already: lists of the kind are then answered from the copy. It
// resolves the kind (discovery) and returns; the copy fills in the
// background, and lists wait for it. Without a Store it does nothing.
//
// The kind counts as pending while it is resolved, so that Reflect may run
// in the background of a start: against an API server that drops packets
// a resolution lasts the discovery client's timeout, 32 s, and readiness
// must meanwhile neither settle nor wait for it. A kind that cannot be
// resolved because discovery failed (the API server cannot be reached)
// stays pending and is resolved again in the background, with capped
// exponential backoff (retryPending), at once when ReflectorsSettled asks,
// which is not true before; Waiting says why. A kind the API server does
// not serve is not resolved again.
func (k *Kubernetes) Reflect(apiVersion, kind string) error {
	if k.reflectors == nil {
		return nil
	}
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	k.pendingMu.Lock()
	if _, ok := k.pending[gvk]; !ok {
		k.pending[gvk] = errResolving
	}
	k.pendingMu.Unlock()
	m, err := k.mapping(apiVersion, kind)
	if err != nil && !errors.As(err, new(*unknownKindError)) {
		k.retryLater(gvk, err)
		return err
	}
	if err == nil {
		_, err = k.reflectors.Start(m.Resource) // before the kind leaves pending: settled waits for its list
	}
	k.pendingMu.Lock()
	delete(k.pending, gvk)
	k.pendingMu.Unlock()
	return err
}

// retryLater keeps a kind pending for retryPending, which it starts unless
// it runs.
func (k *Kubernetes) retryLater(gvk schema.GroupVersionKind, why error) {
	k.pendingMu.Lock()
	defer k.pendingMu.Unlock()
	k.pending[gvk] = why
	if !k.retrying {
		k.retrying = true
		go k.retryPending()
	}
}

// errResolving is why a kind is pending while Reflect resolves it.
var errResolving = errors.New("asking the API server for the kind")

// RetainReflectors stops the reflectors of every kind but kinds (the kinds
// the policies served may read) and drops their copies: a policy removed
// leaves nothing watching. A kind dropped and wanted again is listed anew.
// When a kind cannot be resolved (discovery failed), nothing is stopped:
// its reflector could not be told from the others.
func (k *Kubernetes) RetainReflectors(ctx context.Context, kinds []schema.GroupVersionKind) {
	if k.reflectors == nil {
		return
	}
	keep := map[schema.GroupVersionResource]bool{}
	for _, gvk := range kinds {
		apiVersion, kind := gvk.ToAPIVersionAndKind()
		m, err := k.mapping(apiVersion, kind)
		if unknown := (*unknownKindError)(nil); errors.As(err, &unknown) {
			continue
		}
		if err != nil {
			return
		}
		keep[m.Resource] = true
	}
	k.pendingMu.Lock()
	for gvk := range k.pending {
		if !slices.Contains(kinds, gvk) {
			delete(k.pending, gvk)
		}
	}
	k.pendingMu.Unlock()
	k.reflectors.Retain(ctx, func(gvr schema.GroupVersionResource) bool { return keep[gvr] })
}

// ListsChangedSince tells whether the objects of a kind changed since a
// time; tracked is false unless a reflector of the kind holds a full list.
func (k *Kubernetes) ListsChangedSince(apiVersion, kind string, since time.Time) (changed, tracked bool) {
	t, _ := k.syncedTable(apiVersion, kind)
	if t == nil {
		return false, false
	}
	return t.ChangedSince(since), true
}

// syncedTable returns the table of a kind's reflector and the kind's
// mapping when the reflector holds a full list; nil otherwise (no store, a
// kind not resolved, or not reflected, or not listed yet).
func (k *Kubernetes) syncedTable(apiVersion, kind string) (*reflector.Table, *meta.RESTMapping) {
	if k.reflectors == nil {
		return nil, nil
	}
	m, err := k.mapping(apiVersion, kind)
	if err != nil {
		return nil, nil
	}
	if t := k.reflectors.Table(m.Resource); t != nil && t.HasSynced() {
		return t, m
	}
	return nil, nil
}

// ReflectorsSettled reports whether every reflector started has listed
// its objects, or cannot (reflector.Reflectors.Settled). Without a Store
// it is true. It answers at once, for a readiness probe: while kinds are
// pending it asks retryPending to try them now rather than at its next
// backoff, and is false. It never waits for discovery itself: against an
// API server that drops packets a try lasts the discovery client's
// timeout, 32 s, far over a probe's.
func (k *Kubernetes) ReflectorsSettled() bool {
	if k.reflectors == nil {
		return true
	}
	k.pendingMu.Lock()
	pending := len(k.pending) > 0
	k.pendingMu.Unlock()
	if pending {
		select {
		case k.retryNow <- struct{}{}:
		default: // asked already
		}
		return false
	}
	return k.reflectors.Settled()
}

// reflectPending resolves the pending kinds again and starts their
// reflectors. A kind stays pending while it is tried (Reflect): a
// readiness probe meanwhile must not find nothing pending and settle.
func (k *Kubernetes) reflectPending() {
	k.pendingMu.Lock()
	kinds := slices.Collect(maps.Keys(k.pending))
	k.pendingMu.Unlock()
	for _, gvk := range kinds {
		_ = k.Reflect(gvk.ToAPIVersionAndKind()) // a kind that fails stays pending
	}
}

// retryPending resolves the pending kinds again, and starts their
// reflectors, until none is left or Close: after pendingRetryFirst, then
// twice as late each time, at most pendingRetryMax apart, and also when
// ReflectorsSettled asks. So an API server unreachable at start is picked
// up when it comes back, with no signal and no request needed, and a
// readiness probe sees it as soon as it asks.
func (k *Kubernetes) retryPending() {
	delay := k.retryFirst
	for {
		t := time.NewTimer(delay)
		select {
		case <-k.closed:
			t.Stop()
			return
		case <-t.C:
		case <-k.retryNow:
			t.Stop()
		}
		k.reflectPending()
		k.pendingMu.Lock()
		if len(k.pending) == 0 {
			k.retrying = false
			k.pendingMu.Unlock()
			return
		}
		k.pendingMu.Unlock()
		delay = min(2*delay, k.retryMax)
	}
}

// Waiting says why the reflectors are not settled, for the readiness
// endpoint: the kinds that could not be resolved and why, or the first
// lists still awaited; "" when they are settled.
func (k *Kubernetes) Waiting() string {
	if k.reflectors == nil {
		return ""
	}
	k.pendingMu.Lock()
	var reasons []string
	for gvk, err := range k.pending {
		apiVersion, kind := gvk.ToAPIVersionAndKind()
		reasons = append(reasons, fmt.Sprintf("%s/%s (%v)", apiVersion, kind, err))
	}
	k.pendingMu.Unlock()
	if len(reasons) > 0 {
		slices.Sort(reasons)
		return "waiting for the Kubernetes API server to resolve the kinds the policies read, trying again with backoff: " + strings.Join(reasons, "; ")
	}
	if !k.reflectors.Settled() {
		return "waiting for the first lists of the Kubernetes kinds the policies read"
	}
	return ""
}

// Close stops the reflectors, and the retries of pending kinds.
func (k *Kubernetes) Close() {
	k.closeOnce.Do(func() { close(k.closed) })
	if k.reflectors != nil {
		k.reflectors.Stop()
	}
}

// Handle answers a kubernetes request.
func (k *Kubernetes) Handle(ctx context.Context, req Request) ([]byte, error) {
	switch r := req.(type) {
	case KubernetesListResourceNamespace:
		return k.list(ctx, r.APIVersion, r.Kind, &r.Namespace, r.LabelSelector, r.FieldSelector, r.FieldMasks)
	case KubernetesListResourceAll:
		return k.list(ctx, r.APIVersion, r.Kind, nil, r.LabelSelector, r.FieldSelector, r.FieldMasks)
	case KubernetesGetResource:
		return k.get(ctx, r)
	case KubernetesGetResourcePluralName:
		m, err := k.mapping(r.APIVersion, r.Kind)
		if err != nil {
			return nil, err
		}
		return json.Marshal(m.Resource.Resource)
	case KubernetesCanI:
		if r.DisableCache {
			return k.canIUncached(ctx, r.Request)
		}
		return k.canI.get(cacheKey(r), func() ([]byte, error) { return k.canIUncached(ctx, r.Request) })
	}
	return nil, fmt.Errorf("unsupported request %s", req.Variant())
}

// mapping resolves apiVersion and kind to a resource and its scope.
func (k *Kubernetes) mapping(apiVersion, kind string) (*meta.RESTMapping, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Version == "" {
		return nil, fmt.Errorf("cannot determine group and version for %s", apiVersion)
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: kind}
	m, err := k.mapper.RESTMapping(gk, gv.Version)
	if meta.IsNoMatchError(err) && k.mayRediscover() {
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gk, gv.Version)
	}
	switch {
	case meta.IsNoMatchError(err):
		return nil, &unknownKindError{apiVersion: apiVersion, kind: kind}
	case err != nil:
		return nil, fmt.Errorf("error finding resource %s / %s: %w", apiVersion, kind, err)
	}
	return m, nil
}

// unknownKindError is the error of a kind the API server does not serve.
type unknownKindError struct{ apiVersion, kind string }

func (e *unknownKindError) Error() string {
	return fmt.Sprintf("Cannot find resource %s/%s", e.apiVersion, e.kind)
}

// mayRediscover reports whether discovery may be refreshed now.
func (k *Kubernetes) mayRediscover() bool {
	k.resetMu.Lock()
	defer k.resetMu.Unlock()
	if time.Since(k.lastReset) < mapperResetInterval {
		return false
	}
	k.lastReset = time.Now()
	return true
}

// kubeList is the answer of the list requests, Kubewarden's ObjectList.
type kubeList struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   struct{} `json:"metadata"`
	Items      []any    `json:"items"`
}

// list answers the list requests; namespace nil lists the whole cluster.
func (k *Kubernetes) list(ctx context.Context, apiVersion, kind string, namespace, labelSelector, fieldSelector *string, masks []string) ([]byte, error) {
	m, err := k.mapping(apiVersion, kind)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = k.dynamic.Resource(m.Resource)
	if namespace != nil {
		if m.Scope.Name() != meta.RESTScopeNameNamespace {
			return nil, fmt.Errorf("resource %s/%s is cluster wide. Cannot search for it inside of a namespace", apiVersion, kind)
		}
		ri = k.dynamic.Resource(m.Resource).Namespace(*namespace)
	}
	if k.reflectors != nil {
		// A kind Reflect did not start (discovery failed at boot) gets its
		// reflector now, as Kubewarden starts its reflectors on first use.
		t, err := k.reflectors.Start(m.Resource)
		if err == nil {
			err = k.reflectors.WaitSynced(ctx, m.Resource)
		}
		if err != nil {
			return nil, err
		}
		return k.lists.answer(ctx, t, listQuery{apiVersion: apiVersion, kind: kind, namespace: namespace,
			labelSelector: labelSelector, fieldSelector: fieldSelector, masks: masks})
	}
	out := kubeList{APIVersion: apiVersion, Kind: kind + "List", Items: []any{}}
	mask := newMask(masks)
	opts := metav1.ListOptions{Limit: listPageSize}
	if labelSelector != nil {
		opts.LabelSelector = *labelSelector
	}
	if fieldSelector != nil {
		opts.FieldSelector = *fieldSelector
	}
	for {
		page, err := ri.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			obj := item.Object
			reflector.Trim(obj)
			mask.prune(obj)
			out.Items = append(out.Items, obj)
		}
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	return json.Marshal(out)
}

// get answers get_resource, from the cache unless disabled; field masks
// apply to a copy of the cached object.
func (k *Kubernetes) get(ctx context.Context, r KubernetesGetResource) ([]byte, error) {
	fetch := func() ([]byte, error) { return k.getUncached(ctx, r.APIVersion, r.Kind, r.Name, r.Namespace) }
	raw, reflected, err := k.getReflected(ctx, r)
	switch {
	case reflected:
	case r.DisableCache:
		raw, err = fetch()
	default:
		key := fmt.Sprintf("%s,%s,%s,%s", r.APIVersion, r.Kind, r.Name, rustOption(r.Namespace))
		raw, err = k.gets.get(key, fetch)
	}
	if err != nil || len(r.FieldMasks) == 0 {
		return raw, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	newMask(r.FieldMasks).prune(obj)
	return json.Marshal(obj)
}

// getReflected answers get_resource from the reflector of the kind, when
// one holds a full list and the request does not disable caches; reflected
// is false otherwise. Its answer is the object as the reflector keeps it,
// without managedFields and the last-applied-configuration annotation.
func (k *Kubernetes) getReflected(ctx context.Context, r KubernetesGetResource) (raw []byte, reflected bool, err error) {
	if r.DisableCache {
		return nil, false, nil
	}
	t, m := k.syncedTable(r.APIVersion, r.Kind)
	if t == nil {
		return nil, false, nil // getUncached answers, errors included
	}
	namespace := ""
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if r.Namespace == nil {
			return nil, true, errNoNamespace(r.APIVersion, r.Kind)
		}
		namespace = *r.Namespace
	}
	raw, err = t.Get(ctx, namespace, r.Name)
	if err == nil && raw == nil {
		err = errNotFound(r.APIVersion, r.Kind, r.Name, r.Namespace)
	}
	return raw, true, err
}

func (k *Kubernetes) getUncached(ctx context.Context, apiVersion, kind, name string, namespace *string) ([]byte, error) {
	m, err := k.mapping(apiVersion, kind)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = k.dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if namespace == nil {
			return nil, errNoNamespace(apiVersion, kind)
		}
		ri = k.dynamic.Resource(m.Resource).Namespace(*namespace)
	}
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errNotFound(apiVersion, kind, name, namespace)
	}
	if err != nil {
		return nil, err
	}
	return obj.MarshalJSON()
}

// The errors of get_resource, in Kubewarden's words.

func errNoNamespace(apiVersion, kind string) error {
	//lint:ignore ST1005 Kubewarden's wording, which policies see
	return fmt.Errorf("Resource %s/%s is namespaced, but no namespace was provided", apiVersion, kind)
}

func errNotFound(apiVersion, kind, name string, namespace *string) error {
	//lint:ignore ST1005 Kubewarden's wording, which policies see
	return fmt.Errorf("Cannot find %s/%s named '%s' inside of namespace '%s'", apiVersion, kind, name, rustOption(namespace))
}

// rustOption writes an optional string as Rust's Debug does: None or
// Some("x").
func rustOption(s *string) string {
	if s == nil {
		return "None"
	}
	return fmt.Sprintf("Some(%q)", *s)
}

// canIUncached creates a SubjectAccessReview and answers its status.
func (k *Kubernetes) canIUncached(ctx context.Context, r SubjectAccessReview) ([]byte, error) {
	a := r.ResourceAttributes
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   r.User,
		Groups: r.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   value(a.Namespace),
			Verb:        a.Verb,
			Group:       value(a.Group),
			Version:     value(a.Version),
			Resource:    a.Resource,
			Subresource: value(a.Subresource),
			Name:        value(a.Name),
		},
	}}
	res, err := k.sar.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return json.Marshal(res.Status)
}

func value(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// mask is a tree of field names built from dot-separated field masks.
type mask map[string]mask

func newMask(paths []string) mask {
	root := mask{}
	for _, p := range paths {
		n := root
		for _, part := range strings.Split(p, ".") {
			child, ok := n[part]
			if !ok {
				child = mask{}
				n[part] = child
			}
			n = child
		}
	}
	return root
}

// prune keeps, of obj's fields other than apiVersion, kind and metadata,
// only those the mask names. An empty mask keeps everything.
func (m mask) prune(obj map[string]any) {
	if len(m) == 0 {
		return
	}
	for k, v := range obj {
		if k == "apiVersion" || k == "kind" || k == "metadata" {
			continue
		}
		child, ok := m[k]
		if !ok {
			delete(obj, k)
			continue
		}
		child.pruneValue(v)
	}
}

// pruneValue prunes a value in place: objects keep the fields the mask
// names, arrays apply the mask to each item, anything under a leaf of the
// mask is kept whole.
func (m mask) pruneValue(v any) {
	if len(m) == 0 {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			child, ok := m[k]
			if !ok {
				delete(x, k)
				continue
			}
			child.pruneValue(c)
		}
	case []any:
		for _, item := range x {
			m.pruneValue(item)
		}
	}
}
