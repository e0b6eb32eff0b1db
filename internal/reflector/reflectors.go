package reflector

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/wardenhq/warden/internal/observability"
)

// Reflectors keeps one reflector per resource, each a client-go Reflector
// that lists and watches the whole cluster's objects of its resource and
// writes them into its table of the Store. Safe for concurrent use.
type Reflectors struct {
	store   *Store
	dynamic dynamic.Interface
	logger  *slog.Logger

	ctx    context.Context // the reflectors' lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	tables map[schema.GroupVersionResource]*Table
}

// New returns reflectors that write into store and read the API server
// through dyn. They run until Stop.
func New(store *Store, dyn dynamic.Interface, logger *slog.Logger) *Reflectors {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Reflectors{store: store, dynamic: dyn, logger: logger, ctx: ctx, cancel: cancel,
		tables: map[schema.GroupVersionResource]*Table{}}
}

// Start starts the reflector of gvr, unless it runs already. It returns at
// once; the table fills as the first list arrives (Table.Synced).
func (r *Reflectors) Start(gvr schema.GroupVersionResource) (*Table, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.tables[gvr]; ok {
		return t, nil
	}
	if r.ctx.Err() != nil {
		return nil, fmt.Errorf("the reflectors are stopped")
	}
	t, err := r.store.Table(r.ctx, gvr)
	if err != nil {
		return nil, err
	}
	ri := r.dynamic.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, opts)
		},
	}
	name := "reflector " + TableName(gvr)
	ref := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, t, cache.ReflectorOptions{Name: name})
	r.tables[gvr] = t
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ref.RunWithContext(r.ctx)
	}()
	r.logger.Info("reflector started", observability.KeyResource, gvr.String(), observability.KeyTable, TableName(gvr))
	return t, nil
}

// Table returns the table of gvr's reflector, or nil when none runs.
func (r *Reflectors) Table(gvr schema.GroupVersionResource) *Table {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tables[gvr]
}

// Stop stops every reflector and waits for them.
func (r *Reflectors) Stop() {
	r.cancel()
	r.wg.Wait()
}
