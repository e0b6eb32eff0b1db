package hostcap

import (
	"sync"
	"time"
)

// ttlCache keeps successful answers for a fixed time after they were
// obtained, as Kubewarden's cached functions (time = N, result = true) do.
// Concurrent misses of one key each compute the answer; the last one stays.
// Safe for concurrent use.
type ttlCache struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	entries   map[string]cacheEntry
	pruneSize int // prune expired entries when the map reaches this size
}

type cacheEntry struct {
	val     []byte
	expires time.Time
}

const minPruneSize = 64

func newTTLCache(ttl time.Duration, now func() time.Time) *ttlCache {
	return &ttlCache{ttl: ttl, now: now, entries: map[string]cacheEntry{}, pruneSize: minPruneSize}
}

// get returns the cached answer of key while it is fresh, and otherwise
// fill's, which is kept when it is not an error. Callers must not modify
// the bytes returned.
func (c *ttlCache) get(key string, fill func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return e.val, nil
	}
	val, err := fill()
	if err != nil {
		return nil, err
	}
	c.put(key, val)
	return val, nil
}

func (c *ttlCache) put(key string, val []byte) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.pruneSize {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		c.pruneSize = max(minPruneSize, 2*len(c.entries))
	}
	c.entries[key] = cacheEntry{val: val, expires: now.Add(c.ttl)}
}
