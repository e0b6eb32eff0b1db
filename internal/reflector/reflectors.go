package reflector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/observability"
)

// Reflectors keeps one reflector per resource: it lists the whole
// cluster's objects of the resource into its table of the Store, then
// watches them and writes each change. Safe for concurrent use.
//
// Objects travel as the API server's JSON, one page of a list at a time:
// nothing decodes a list whole, and objects are trimmed (Trimmed) on a
// tape of their text, never decoded into Go values (trimmer). The first
// lists run one after the other (RFC 004's mitigation), so that a start
// with many kinds does not hold many pages at once nor load the API server
// with many lists.
type Reflectors struct {
	store  *Store
	client rest.Interface
	logger *slog.Logger
	opts   Options

	ctx    context.Context // the reflectors' lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lists  sync.Mutex // held by the reflector that lists

	mu        sync.Mutex
	reflected map[schema.GroupVersionResource]*reflected
}

// Options tune Reflectors.
type Options struct {
	// PageSize is the most objects a list asks for at a time; 0 means
	// 500, client-go's. Pages of large objects are smaller (pageBytes).
	PageSize int64
	// OnPage, when set, is called with the objects of each page a list
	// wrote, before the page is dropped: tests see what one page holds.
	OnPage func(gvr schema.GroupVersionResource, objects []Object)
}

const defaultPageSize = 500

// pageBytes is the size of JSON a list page aims at: a list's first page
// asks for minPageSize objects, and each later page for as many as fit, by
// the size of those read so far, so that Pods of 34 KB are read as pages of
// 30, not of 500 (17 MB, and the memory to read and trim them).
const pageBytes = 1 << 20

// freeAfterListBytes is the size of a list after which the memory its
// pages took is given back to the system at once.
const freeAfterListBytes = 16 << 20

// minPageSize bounds how small pageBytes makes a page.
const minPageSize = 10

// nextPageSize is the number of objects the next page of a list asks for,
// after a page of n objects in size bytes.
func (r *Reflectors) nextPageSize(n, size int) int64 {
	if n == 0 || size == 0 {
		return r.opts.PageSize
	}
	return min(r.opts.PageSize, max(minPageSize, int64(pageBytes)*int64(n)/int64(size)))
}

// reflected is the state of one resource's reflector.
type reflected struct {
	table  *Table
	cancel context.CancelFunc // stops the reflector
	done   chan struct{}      // closed when it stopped

	mu           sync.Mutex
	listErr      error     // of the last list, nil once one succeeded
	failing      bool      // the last list, or the watch after it, failed
	lists        uint64    // complete lists
	listFailures uint64    // lists that failed
	lastList     time.Time // when the last complete list ended
}

// State is what the metrics show of one reflector (Reflectors.States).
type State struct {
	// Resource is the resource the reflector copies.
	Resource schema.GroupVersionResource
	// Synced is true when the table holds a complete list and the
	// reflector keeps it current: neither its last list nor the watch
	// after it failed. A reflector whose list the API server refuses, or
	// that cannot reach the API server, is not synced.
	Synced bool
	// Lists counts the complete lists since the reflector started: the
	// first, and each list again after a watch the API server could not
	// resume (410 Gone). ListFailures counts the lists that failed.
	Lists, ListFailures uint64
	// LastList is when the last complete list ended; zero before the
	// first.
	LastList time.Time
}

// New returns reflectors that write into store what they read from the API
// server of cfg. They run until Stop.
func New(store *Store, cfg *rest.Config, logger *slog.Logger, opts Options) (*Reflectors, error) {
	client, err := rawClient(cfg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.PageSize <= 0 {
		opts.PageSize = defaultPageSize
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Reflectors{store: store, client: client, logger: logger, opts: opts, ctx: ctx, cancel: cancel,
		reflected: map[schema.GroupVersionResource]*reflected{}}, nil
}

// rawClient is a REST client of the API server that hands bodies over as
// they are; only errors (metav1.Status) are decoded.
func rawClient(cfg *rest.Config) (rest.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.APIPath = "/"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.AcceptContentTypes = "application/json"
	cfg.ContentType = "application/json"
	client, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the reflectors' Kubernetes client: %w", err)
	}
	return client, nil
}

// Start starts the reflector of gvr, unless it runs already. It returns at
// once; the table fills as the first list arrives (Table.HasSynced).
func (r *Reflectors) Start(gvr schema.GroupVersionResource) (*Table, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rf, ok := r.reflected[gvr]; ok {
		return rf.table, nil
	}
	if r.ctx.Err() != nil {
		return nil, errors.New("the reflectors are stopped")
	}
	t, err := r.store.Table(r.ctx, gvr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	rf := &reflected{table: t, cancel: cancel, done: make(chan struct{})}
	r.reflected[gvr] = rf
	r.wg.Go(func() {
		defer close(rf.done)
		r.run(ctx, gvr, rf)
	})
	r.logger.Info("reflector started", observability.KeyResource, gvr.String(), observability.KeyTable, t.Name())
	return t, nil
}

// Table returns the table of gvr's reflector, or nil when none runs.
func (r *Reflectors) Table(gvr schema.GroupVersionResource) *Table {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rf, ok := r.reflected[gvr]; ok {
		return rf.table
	}
	return nil
}

// Settled reports whether every reflector has listed its objects, or
// cannot: the API server refused its list (the resource is gone, or the
// policy server may not list it). A reflector whose list failed otherwise,
// for instance because the API server cannot be reached, is not settled.
// The policy server is ready once its reflectors are settled: a policy
// reading a kind that is not would have its requests wait.
func (r *Reflectors) Settled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rf := range r.reflected {
		if rf.table.HasSynced() {
			continue
		}
		rf.mu.Lock()
		err := rf.listErr
		rf.mu.Unlock()
		if !refused(err) {
			return false
		}
	}
	return true
}

// refused reports whether err is the API server's refusal of a list, which
// trying again will not change soon: the resource is gone, or the policy
// server may not list it.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err)
}

// refusedPoll is how often WaitSynced looks whether the list was refused.
const refusedPoll = 50 * time.Millisecond

// WaitSynced waits until the table of gvr's reflector (Start) holds a full
// list, or ctx is done. When the API server refuses the reflector's list
// (refused), it returns that error at once: a request waiting now would
// otherwise wait out its policy's time limit, and answer only that.
func (r *Reflectors) WaitSynced(ctx context.Context, gvr schema.GroupVersionResource) error {
	r.mu.Lock()
	rf, ok := r.reflected[gvr]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("no reflector of %s runs", gvr)
	}
	if rf.table.HasSynced() {
		return nil
	}
	tick := time.NewTicker(refusedPoll)
	defer tick.Stop()
	for {
		rf.mu.Lock()
		err := rf.listErr
		rf.mu.Unlock()
		if refused(err) {
			return fmt.Errorf("listing %s: %w", gvr.Resource, err)
		}
		select {
		case <-rf.table.synced:
			return nil
		case <-ctx.Done():
			return rf.table.WaitSynced(ctx)
		case <-tick.C:
		}
	}
}

// States returns the state of every reflector that runs, sorted by
// resource.
func (r *Reflectors) States() []State {
	r.mu.Lock()
	out := make([]State, 0, len(r.reflected))
	for gvr, rf := range r.reflected {
		rf.mu.Lock()
		out = append(out, State{Resource: gvr, Synced: rf.table.HasSynced() && !rf.failing,
			Lists: rf.lists, ListFailures: rf.listFailures, LastList: rf.lastList})
		rf.mu.Unlock()
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b State) int { return strings.Compare(a.Resource.String(), b.Resource.String()) })
	return out
}

// Retain stops the reflectors of the resources keep rejects, waits for
// them and drops their tables: no policy reads those resources any more.
// A resource started again later is listed anew. It returns the resources
// whose reflectors it stopped.
func (r *Reflectors) Retain(ctx context.Context, keep func(schema.GroupVersionResource) bool) []schema.GroupVersionResource {
	r.mu.Lock()
	stopped := map[schema.GroupVersionResource]*reflected{}
	for gvr, rf := range r.reflected {
		if !keep(gvr) {
			rf.cancel()
			stopped[gvr] = rf
			delete(r.reflected, gvr)
		}
	}
	r.mu.Unlock()
	var out []schema.GroupVersionResource
	for gvr, rf := range stopped {
		<-rf.done
		if err := r.store.Drop(ctx, gvr); err != nil {
			r.logger.Warn("reflector stopped, its table not dropped", observability.KeyResource, gvr.String(), observability.KeyError, err)
		} else {
			r.logger.Info("reflector stopped: no policy reads its resource", observability.KeyResource, gvr.String())
		}
		out = append(out, gvr)
	}
	return out
}

// Stop stops every reflector and waits for them.
func (r *Reflectors) Stop() {
	r.cancel()
	r.wg.Wait()
}

// errRelist ends a watch whose resource version is too old: the reflector
// lists again.
var errRelist = errors.New("the watch's resource version is too old")

// run lists and watches gvr until ctx is done (the reflector is stopped):
// a failed list is tried again after a backoff; a watch that ends is
// started again from the last resource version it saw, and a watch that
// cannot be (410 Gone) lists again.
func (r *Reflectors) run(ctx context.Context, gvr schema.GroupVersionResource, rf *reflected) {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 10, Cap: 30 * time.Second}
	retry := backoff
	for ctx.Err() == nil {
		rv, err := r.list(ctx, gvr, rf.table)
		if ctx.Err() != nil {
			return // a list cut short by the stop is no failure
		}
		rf.listed(err)
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("reflector cannot list its objects: trying again", observability.KeyResource, gvr.String(), observability.KeyError, err)
				sleep(ctx, retry.Step())
			}
			continue
		}
		retry = backoff
		for ctx.Err() == nil {
			rv, err = r.watch(ctx, gvr, rf.table, rv, rf.watching)
			if errors.Is(err, errRelist) || ctx.Err() != nil {
				break
			}
			if err != nil {
				rf.setFailing()
				r.logger.Warn("reflector watch failed: watching again", observability.KeyResource, gvr.String(), observability.KeyError, err)
				sleep(ctx, retry.Step())
				continue
			}
			retry = backoff
		}
	}
}

// listed records the end of a list, which err says failed.
func (rf *reflected) listed(err error) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	rf.listErr, rf.failing = err, err != nil
	if err != nil {
		rf.listFailures++
		return
	}
	rf.lists++
	rf.lastList = time.Now()
}

// setFailing records a watch that failed.
func (rf *reflected) setFailing() {
	rf.mu.Lock()
	rf.failing = true
	rf.mu.Unlock()
}

// watching records a watch that the API server accepted.
func (rf *reflected) watching() {
	rf.mu.Lock()
	rf.failing = false
	rf.mu.Unlock()
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// path is the URL path of gvr's objects in every namespace.
func path(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// list writes a full list of gvr's objects into t, a page at a time, and
// returns the list's resource version. A continue token that expired
// (the API server compacted its history meanwhile) starts the list again.
//
// A page is read into one string, parsed into a tape and trimmed object by
// object into the trimmer's buffer, which the next page reuses: nothing
// decodes the objects into Go values (trimmer).
func (r *Reflectors) list(ctx context.Context, gvr schema.GroupVersionResource, t *Table) (string, error) {
	r.lists.Lock()
	defer r.lists.Unlock()
	l, err := t.NewListing(ctx)
	if err != nil {
		return "", err
	}
	var w trimmer
	objects := make([]Object, 0, r.opts.PageSize)
	cont, limit, read, last := "", min(r.opts.PageSize, minPageSize), 0, 0
	for {
		req := r.client.Get().AbsPath(path(gvr)).Param("limit", strconv.FormatInt(limit, 10))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := readPage(ctx, req, last)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			if l, err = t.NewListing(ctx); err != nil {
				return "", err
			}
			cont = ""
			continue
		}
		if err != nil {
			return "", err
		}
		page, err := w.page(body)
		if err != nil {
			return "", fmt.Errorf("reading a list of %s: %w", gvr.Resource, err)
		}
		last, read = len(body), read+len(body)
		limit = r.nextPageSize(len(page.items), len(body))
		objects = objects[:0]
		w.reset()
		for _, i := range page.items {
			o, err := w.object(i, page.itemType)
			if err != nil {
				return "", fmt.Errorf("a list of %s: %w", gvr.Resource, err)
			}
			objects = append(objects, o)
		}
		if err := l.Page(ctx, objects); err != nil {
			return "", err
		}
		if r.opts.OnPage != nil {
			r.opts.OnPage(gvr, objects)
		}
		clear(objects)
		if cont = page.cont; cont == "" {
			if err := l.Commit(ctx); err != nil {
				return "", err
			}
			if read >= freeAfterListBytes {
				// The pages were garbage as soon as they were written, but
				// Go returns their memory to the system over minutes.
				debug.FreeOSMemory()
			}
			return page.resourceVersion, nil
		}
	}
}

// readPage reads the answer to req, a list, into one string, sized for an
// answer of about last bytes (the previous page's).
func readPage(ctx context.Context, req *rest.Request, last int) (string, error) {
	stream, err := req.Stream(ctx)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var b strings.Builder
	b.Grow(last + last/8)
	if _, err := io.Copy(&b, stream); err != nil {
		return "", fmt.Errorf("reading a list page: %w", err)
	}
	return b.String(), nil
}

// watchEvent is an event of a watch stream, its object left as it came.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watch writes the changes to gvr's objects after resource version rv into
// t until the watch ends, and returns the last resource version seen. It
// returns errRelist when the API server cannot watch from rv. It calls
// started once the API server accepted the watch.
func (r *Reflectors) watch(ctx context.Context, gvr schema.GroupVersionResource, t *Table, rv string, started func()) (string, error) {
	// As client-go's reflector: the API server ends the watch after 5 to
	// 10 minutes, so that watches spread over the API servers.
	timeout := 300 + rand.IntN(300)
	stream, err := r.client.Get().AbsPath(path(gvr)).
		Param("watch", "true").
		Param("resourceVersion", rv).
		Param("allowWatchBookmarks", "true").
		Param("timeoutSeconds", strconv.Itoa(timeout)).
		Timeout(time.Duration(timeout+30) * time.Second).
		Stream(ctx)
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return rv, errRelist
	}
	if err != nil {
		return rv, err
	}
	defer stream.Close()
	started()
	d := json.NewDecoder(stream)
	var w trimmer
	for {
		var ev watchEvent
		if err := d.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return rv, nil
			}
			return rv, fmt.Errorf("reading the watch of %s: %w", gvr.Resource, err)
		}
		if ev.Type == "ERROR" {
			var status metav1.Status
			if json.Unmarshal(ev.Object, &status) == nil && (status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired) {
				return rv, errRelist
			}
			return rv, fmt.Errorf("the watch of %s failed: %s", gvr.Resource, ev.Object)
		}
		var meta struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(ev.Object, &meta); err != nil {
			return rv, fmt.Errorf("reading the watch of %s: %w", gvr.Resource, err)
		}
		if ev.Type != "BOOKMARK" {
			w.reset()
			if err := apply(ctx, t, &w, ev); err != nil {
				return rv, err
			}
		}
		rv = meta.Metadata.ResourceVersion
	}
}

// apply writes one change into t, trimmed by w.
func apply(ctx context.Context, t *Table, w *trimmer, ev watchEvent) error {
	o, err := w.trimmed(ev.Object, metav1.TypeMeta{})
	if err != nil {
		return err
	}
	switch ev.Type {
	case "ADDED", "MODIFIED":
		return t.Put(ctx, o)
	case "DELETED":
		return t.Remove(ctx, o.Namespace, o.Name)
	}
	return fmt.Errorf("unknown watch event %q", ev.Type)
}
