package policysync

import (
	"context"
	"maps"
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// informerSet holds informers on the hub shared by the PolicySyncs that
// use them (their users), one per key K whatever the number of users: the
// Syncer keeps one set for the resources to sync (keyed by GVR) and one
// for the kubeconfig Secrets (kubeconfigSecrets, keyed by name). An
// informer is started by its first user and stopped when its last user
// releases it. Its events, and the failures of its lists and watches, are
// passed to notify once for each of its users.
//
// Its methods are safe for concurrent use. mu is held only to update the
// set and to start or stop an informer, which does not wait on the network
// (the informer lists and watches in a goroutine of its own): never across
// an API call, so one PolicySync's use of the set never waits for
// another's.
type informerSet[K comparable] struct {
	newInformer func(K) cache.SharedIndexInformer
	notify      func(user string)

	mu sync.Mutex // guards entries, and the users and failure of each entry
	// entries holds the informers in use, by key.
	entries map[K]*sharedInformer
}

// sharedInformer is one informer of an informerSet.
type sharedInformer struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc

	// Guarded by informerSet.mu: users are the names of the PolicySyncs
	// that use the informer; failure is why its last list or watch failed,
	// nil if none did, read only while the informer has not synced.
	users   map[string]bool
	failure error
}

// newInformerSet returns an empty set whose informers newInformer makes
// (not started) and whose events notify each user of.
func newInformerSet[K comparable](newInformer func(K) cache.SharedIndexInformer, notify func(user string)) *informerSet[K] {
	return &informerSet[K]{newInformer: newInformer, notify: notify, entries: map[K]*sharedInformer{}}
}

// informerState is what a user learns of an informer it uses.
type informerState struct {
	// store is the informer's cache.
	store cache.Store
	// synced says whether the cache has been filled.
	synced bool
	// failure is why the informer's last list or watch failed, while it
	// has not synced; nil if none did.
	failure error
}

// use makes user a user of the informer of key, started under ctx (the
// leader's) when it is the first, and returns its state.
func (s *informerSet[K]) use(ctx context.Context, key K, user string) informerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil {
		e = s.start(ctx, key)
		s.entries[key] = e
	}
	e.users[user] = true
	st := informerState{store: e.informer.GetStore(), synced: e.informer.HasSynced()}
	if !st.synced {
		st.failure = e.failure
	}
	return st
}

// start starts the informer of key. Called with s.mu held.
func (s *informerSet[K]) start(ctx context.Context, key K) *sharedInformer {
	ctx, cancel := context.WithCancel(ctx)
	e := &sharedInformer{informer: s.newInformer(key), stop: cancel, users: map[string]bool{}}
	notify := func(any) { s.notifyUsers(e) }
	_, _ = e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, o any) { notify(o) },
		DeleteFunc: notify,
	})
	// A list refused (a Secret the syncer may not read) leaves the
	// informer unsynced and retrying: the failure is kept for the status.
	_ = e.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.mu.Lock()
		e.failure = err
		s.mu.Unlock()
		s.notifyUsers(e)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	go e.informer.RunWithContext(ctx)
	return e
}

// notifyUsers passes an event of e to each of its users, without s.mu
// held: notify may wait.
func (s *informerSet[K]) notifyUsers(e *sharedInformer) {
	s.mu.Lock()
	users := slices.Collect(maps.Keys(e.users))
	s.mu.Unlock()
	for _, name := range users {
		s.notify(name)
	}
}

// release stops user's use of the informer of key, if it used it.
func (s *informerSet[K]) release(key K, user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		s.releaseEntry(key, e, user)
	}
}

// keepOnly stops user's use of every informer whose key is not in keep
// (nil: of all of them).
func (s *informerSet[K]) keepOnly(user string, keep map[K]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, e := range s.entries {
		if !keep[key] && e.users[user] {
			s.releaseEntry(key, e, user)
		}
	}
}

// releaseEntry removes user from e, and stops e when it has no user left.
// Called with s.mu held.
func (s *informerSet[K]) releaseEntry(key K, e *sharedInformer, user string) {
	delete(e.users, user)
	if len(e.users) == 0 {
		e.stop()
		delete(s.entries, key)
	}
}
