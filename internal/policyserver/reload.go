package policyserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
)

// reloadSettle is how long the policies file must stay quiet after a change
// before it is read: an editor's rewrite in place comes as several writes,
// a ConfigMap update as several renames.
const reloadSettle = 50 * time.Millisecond

// Log messages of hot reload.
const (
	msgReloadFailed  = "policy change failed: the previous version keeps serving"
	msgAddFailed     = "new policy failed to load: it is not served"
	msgReloaded      = "policy changed"
	msgFileFailed    = "cannot read the policies file: every policy keeps serving as it is"
	msgReloadWatched = "watching the policies file for changes"
)

// errEmptyPolicies refuses a reload of an empty policies file: a file
// rewritten in place is empty between its truncation and its write, and a
// reload that caught that moment would remove every policy. "{}" removes
// them all on purpose.
var errEmptyPolicies = errors.New("the file is empty: every policy keeps serving (write {} to remove them all)")

// readPolicies reads and parses the policies file.
func readPolicies(path string) (map[string]*engine.PolicyConfig, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading policies: %w", err)
	}
	return parsePolicies(path, doc)
}

func parsePolicies(path string, doc []byte) (map[string]*engine.PolicyConfig, error) {
	configs, err := engine.ParsePolicies(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return configs, nil
}

// startReflectors starts keeping a copy of every Kubernetes kind the
// policies may read (RFC 004); a kind already kept is left as it is.
func (s *Server) startReflectors(ctx context.Context, configs map[string]*engine.PolicyConfig) {
	if s.opts.Reflect == nil {
		return
	}
	for _, r := range engine.ReadResources(configs) {
		if err := s.opts.Reflect(r.APIVersion, r.Kind); err != nil {
			s.logger.WarnContext(ctx, "cannot start the reflector of a Kubernetes kind yet: its first list will try again",
				observability.KeyAPIVersion, r.APIVersion, observability.KeyKind, r.Kind, observability.KeyError, err)
		}
	}
}

// retainReflectors stops keeping a copy of the Kubernetes kinds that no
// policy served may read any more (a policy removed, or its
// contextAwareResources changed).
func (s *Server) retainReflectors(ctx context.Context) {
	if s.opts.RetainReflectors == nil {
		return
	}
	var kinds []schema.GroupVersionKind
	for _, r := range engine.ReadResources(s.env.Configs()) {
		kinds = append(kinds, schema.FromAPIVersionAndKind(r.APIVersion, r.Kind))
	}
	s.opts.RetainReflectors(ctx, kinds)
}

// Reload reads the policies file again and applies what changed: new
// policies are added, changed ones replaced, missing ones removed. A policy
// whose new version fails keeps its previous version serving; a file that
// cannot be read or parsed, or is empty, changes nothing. Each outcome is logged, counted
// in warden_policy_reload_total and shown by GET /policies. It returns the
// changes applied. Safe for concurrent use: reloads run one at a time.
//
// In cluster mode there is no policies file: Reload looks at the
// PolicyRevisions again, in the background, and returns nothing.
func (s *Server) Reload(ctx context.Context) []engine.Change {
	if s.revs != nil {
		s.revs.poke()
		return nil
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	doc, err := os.ReadFile(s.opts.PoliciesPath)
	var configs map[string]*engine.PolicyConfig
	switch {
	case err != nil:
		err = fmt.Errorf("reading policies: %w", err)
	case len(bytes.TrimSpace(doc)) == 0:
		err = fmt.Errorf("%s: %w", s.opts.PoliciesPath, errEmptyPolicies)
	default:
		configs, err = parsePolicies(s.opts.PoliciesPath, doc)
	}
	s.fileErr.Store(nil)
	if err != nil {
		msg := err.Error()
		s.fileErr.Store(&msg)
		s.logger.ErrorContext(ctx, msgFileFailed, observability.KeyPath, s.opts.PoliciesPath, observability.KeyError, err)
		s.metrics.RecordReload(ctx, "", "read", true)
		return nil
	}
	// A policy whose modules are still being fetched waits out of this
	// reload; the end of its fetch reloads again (prefetcher).
	used := s.prefetch.hold(ctx, configs, s.env.Configs(), s.env.Changed(configs))
	s.startReflectors(ctx, configs)
	changes := s.env.Apply(ctx, configs)
	s.prefetch.forget(used)
	for _, c := range changes {
		s.recordReload(ctx, c)
	}
	s.retainReflectors(ctx)
	if loadedModules(changes) {
		// As after the start (New): loading leaves behind garbage several
		// times the size of the modules; hand it back to the OS now.
		debug.FreeOSMemory()
	}
	return changes
}

// loadedModules reports whether changes added or replaced a policy, which
// compiled or instantiated modules.
func loadedModules(changes []engine.Change) bool {
	for _, c := range changes {
		if c.Err == nil && c.Action != engine.ActionRemove {
			return true
		}
	}
	return false
}

// prefetched is called when a fetch that a reload started has ended: the
// policies that waited for it are applied by the reload it starts.
func (s *Server) prefetched(ctx context.Context, uri string, err error) {
	if err != nil {
		s.logger.WarnContext(ctx, "module fetch for a policy change failed: reloading to report it", keyModule, uri, observability.KeyError, err)
	} else {
		s.logger.InfoContext(ctx, "module fetched for a policy change: reloading", keyModule, uri)
	}
	s.Reload(ctx)
}

// keyModule is the log key of a module URI.
const keyModule = "module"

// recordReload logs a change and counts it in warden_policy_reload_total.
func (s *Server) recordReload(ctx context.Context, c engine.Change) {
	s.metrics.RecordReload(ctx, c.ID, c.Action, c.Err != nil)
	switch {
	case c.Err == nil:
		s.logger.InfoContext(ctx, msgReloaded, observability.KeyPolicyID, c.ID, "action", c.Action)
	case c.Action == engine.ActionAdd:
		s.logger.ErrorContext(ctx, msgAddFailed, observability.KeyPolicyID, c.ID, observability.KeyError, c.Err)
	default:
		s.logger.ErrorContext(ctx, msgReloadFailed, observability.KeyPolicyID, c.ID, observability.KeyError, c.Err)
	}
}

// watchPolicies reloads the policies file whenever it changes, until ctx is
// done. It watches the file's directory, so that it sees a file replaced
// by a rename, as editors do, and the "..data" symlink swap by which the
// kubelet updates a mounted ConfigMap.
func (s *Server) watchPolicies(ctx context.Context) error {
	abs, err := filepath.Abs(s.opts.PoliciesPath)
	if err != nil {
		return err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating file watcher: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("watching directory %q: %w", filepath.Dir(abs), err)
	}
	s.logger.DebugContext(ctx, msgReloadWatched, observability.KeyPath, abs)
	// The file may have changed since New read it.
	s.Reload(ctx)

	name := filepath.Base(abs)
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			base := filepath.Base(ev.Name)
			if ev.Op != fsnotify.Chmod && (base == name || strings.HasPrefix(base, "..")) {
				settle.Reset(reloadSettle)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			// For example an event queue overflow: a change may be lost.
			s.logger.WarnContext(ctx, "policies file watch error: reading the file again", observability.KeyError, err)
			settle.Reset(reloadSettle)
		case <-settle.C:
			s.Reload(ctx)
		}
	}
}

// policiesStatus is the answer of GET /policies.
type policiesStatus struct {
	// FileError is why the policies file last failed to be read, if it did.
	FileError string        `json:"fileError,omitempty"`
	Policies  []policyState `json:"policies"`
}

// handlePolicies serves GET /policies on the readiness port: the state of
// every policy, as hot reload left it.
func (s *Server) handlePolicies(w http.ResponseWriter, _ *http.Request) {
	out := policiesStatus{Policies: withFetches(s.env.Status(), s.prefetch.status())}
	if msg := s.fileErr.Load(); msg != nil {
		out.FileError = *msg
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
