package hostcap

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/wardenhq/warden/internal/reflector"
)

// listQuery is a list request answered from a reflector.
type listQuery struct {
	apiVersion, kind string
	namespace        *string // nil: every namespace
	labelSelector    *string
	fieldSelector    *string
	masks            []string
}

// key identifies the query's answer among those of one table.
func (q listQuery) key(table string) string {
	opt := func(s *string) string {
		if s == nil {
			return "\x01"
		}
		return *s
	}
	return strings.Join([]string{table, q.apiVersion, q.kind, opt(q.namespace), opt(q.labelSelector),
		opt(q.fieldSelector), strings.Join(q.masks, "\x02")}, "\x00")
}

// listCache keeps the answers of list requests read from reflectors,
// assembled, each until its table changes: a policy that lists the same
// objects at every request gets the same bytes back without reading the
// store nor writing the answer again. Concurrent misses of one answer
// assemble it once. The answers kept add up to at most maxBytes; an older
// answer makes room for a newer one. Safe for concurrent use.
type listCache struct {
	maxBytes int

	flight singleflight.Group

	mu      sync.Mutex
	entries map[string]*listEntry
	order   []string // keys, oldest first
	size    int
}

type listEntry struct {
	version uint64 // of the table the answer was read at
	answer  []byte
}

// maxListCacheBytes bounds the answers a listCache keeps: enough for the
// lists of thousands of objects a few policies read at every request.
const maxListCacheBytes = 64 << 20

func newListCache(maxBytes int) *listCache {
	return &listCache{maxBytes: maxBytes, entries: map[string]*listEntry{}}
}

// answer returns the answer of q from t, kept or assembled anew. Callers
// must not modify the bytes returned.
func (c *listCache) answer(ctx context.Context, t *reflector.Table, q listQuery) ([]byte, error) {
	key := q.key(t.Name())
	version := t.Version()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && e.version == version {
		return e.answer, nil
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		// Read the version first: a write while the table is read makes
		// the answer newer than its version says, and the next request
		// reads the table again.
		// The callers waiting for the answer share it: the first one's
		// cancellation must not fail the others.
		version := t.Version()
		answer, err := assembleList(context.WithoutCancel(ctx), t, q)
		if err != nil {
			return nil, err
		}
		c.put(key, &listEntry{version: version, answer: answer})
		return answer, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}

func (c *listCache) put(key string, e *listEntry) {
	if len(e.answer) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		c.size -= len(old.answer)
	} else {
		c.order = append(c.order, key)
	}
	c.entries[key] = e
	c.size += len(e.answer)
	for c.size > c.maxBytes {
		oldest := c.order[0]
		c.order = c.order[1:]
		c.size -= len(c.entries[oldest].answer)
		delete(c.entries, oldest)
	}
}

// assembleList reads q's objects from t and writes the answer,
// Kubewarden's ObjectList, around their JSON as the table keeps it.
func assembleList(ctx context.Context, t *reflector.Table, q listQuery) ([]byte, error) {
	objects, err := t.List(ctx, q.namespace)
	if err != nil {
		return nil, err
	}
	items, err := selectObjects(objects, q.labelSelector, q.fieldSelector, newMask(q.masks))
	if err != nil {
		return nil, err
	}
	return listAnswer(q.apiVersion, q.kind, items)
}

// listAnswer writes a list answer around items, as json.Marshal writes a
// kubeList but without compacting each item again.
func listAnswer(apiVersion, kind string, items []json.RawMessage) ([]byte, error) {
	head, err := json.Marshal(kubeList{APIVersion: apiVersion, Kind: kind + "List", Items: []any{}})
	if err != nil {
		return nil, err
	}
	size := len(head) + len(items)
	for _, it := range items {
		size += len(it)
	}
	var b bytes.Buffer
	b.Grow(size)
	b.Write(head[:len(head)-len(`]}`)])
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString(`]}`)
	return b.Bytes(), nil
}
