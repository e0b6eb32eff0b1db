package policysync

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// minStatusInterval spaces a PolicySync's status writes: with many objects
// the status is large, and the workers report after every pass.
const minStatusInterval = 500 * time.Millisecond

// statusRetry is how long a status write that failed waits to be tried
// again.
const statusRetry = time.Second

// statusWriter writes one PolicySync's status in a goroutine of its own.
// A reconcile only hands it the latest status: the PolicySync's next
// reconcile (a hub change to hand to the workers) does not wait for a
// large write to finish. Statuses handed in while a write runs are
// coalesced into one write of the latest.
type statusWriter struct {
	client client.Client
	name   string
	logger *slog.Logger
	kick   chan struct{}

	mu      sync.Mutex
	pending *syncv1alpha1.PolicySyncStatus
	// last is the last status handed in, to tell a new one from a repeat
	// while the PolicySync read from the cache still has an older one.
	last *syncv1alpha1.PolicySyncStatus
}

func newStatusWriter(c client.Client, name string, logger *slog.Logger) *statusWriter {
	return &statusWriter{client: c, name: name, logger: logger, kick: make(chan struct{}, 1)}
}

// set hands the writer status, unless it equals the status last handed in.
func (w *statusWriter) set(status syncv1alpha1.PolicySyncStatus) {
	w.mu.Lock()
	if w.last != nil && equality.Semantic.DeepEqual(*w.last, status) {
		w.mu.Unlock()
		return
	}
	w.last, w.pending = &status, &status
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run writes the statuses handed in until ctx is done, at most one every
// minStatusInterval.
func (w *statusWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		w.mu.Lock()
		status := w.pending
		w.pending = nil
		w.mu.Unlock()
		if status == nil {
			continue
		}
		wait := minStatusInterval
		if err := w.write(ctx, status); err != nil {
			w.logger.Warn("writing the status of a PolicySync", "policySync", w.name, "error", err)
			w.mu.Lock()
			if w.pending == nil {
				w.pending = status
			}
			w.mu.Unlock()
			wait = statusRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		w.mu.Lock()
		again := w.pending != nil
		w.mu.Unlock()
		if again {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// write replaces the PolicySync's status with a JSON merge patch, which
// replaces lists whole and needs no resourceVersion: the status is the
// syncer's alone.
func (w *statusWriter) write(ctx context.Context, status *syncv1alpha1.PolicySyncStatus) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	ps := &syncv1alpha1.PolicySync{ObjectMeta: metav1.ObjectMeta{Name: w.name}}
	return client.IgnoreNotFound(w.client.Status().Patch(ctx, ps, client.RawPatch(types.MergePatchType, patch)))
}
