package observability

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Placeholders of the label values that come from the request
// (resource_namespace, resource_kind, resource_request_operation). Neither is
// a valid namespace, kind or operation, so neither hides a real one.
const (
	// LabelValueInvalid replaces a value that cannot be a valid one: a
	// namespace that is not a DNS-1123 label, a kind that is not a
	// DNS-1035 label once lowercased (the rule for a CRD's kind), an
	// operation other than CREATE, UPDATE, DELETE and CONNECT.
	LabelValueInvalid = "_invalid"
	// LabelValueOther replaces a valid value first seen after the label
	// already holds [MetricsOptions].LabelValueLimit distinct values.
	LabelValueOther = "_other"
)

// DefaultLabelValueLimit is the number of distinct values kept per
// request-derived label unless [MetricsOptions].LabelValueLimit says
// otherwise.
const DefaultLabelValueLimit = 1000

// maxNameLength is the length limit of a DNS label, hence of a namespace and
// of a kind.
const maxNameLength = 63

// boundLabels replaces e's request-derived values that cannot be valid by
// [LabelValueInvalid], and valid ones past the label's limit by
// [LabelValueOther]: a client cannot grow the series, or their size, without
// bound. The empty values (cluster-scoped, kind absent) are kept: they are
// what Kubewarden records.
func (m *Metrics) boundLabels(e Evaluation) Evaluation {
	if e.Raw {
		return e // none of these labels is recorded
	}
	switch e.Operation {
	case "", "CREATE", "UPDATE", "DELETE", "CONNECT":
	default:
		e.Operation = LabelValueInvalid
	}
	switch {
	case e.Namespace == "":
	case !isDNS1123Label(e.Namespace):
		e.Namespace = LabelValueInvalid
	default:
		e.Namespace = m.namespaces.bound(e.Namespace)
	}
	switch {
	case e.ResourceKind == "":
	case !isKind(e.ResourceKind):
		e.ResourceKind = LabelValueInvalid
	default:
		e.ResourceKind = m.kinds.bound(e.ResourceKind)
	}
	return e
}

// isDNS1123Label says whether s is a DNS-1123 label, the form of a
// namespace's name: at most 63 lowercase alphanumerics or '-', starting and
// ending with an alphanumeric.
func isDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// isKind says whether s can be a resource's kind: lowercased, a DNS-1035
// label (the API server's rule for a CRD's kind), that is at most 63 letters,
// digits or '-', starting with a letter and ending with a letter or digit.
func isKind(s string) bool {
	if len(s) == 0 || len(s) > maxNameLength || !isLetter(s[0]) || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !isLetter(c) && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

// labelValues is the set of values a label has taken, up to a limit. A nil
// *labelValues has no limit. Its methods are safe for concurrent use; a value
// already in the set is looked up without a lock or an allocation.
type labelValues struct {
	limit int
	seen  atomic.Pointer[map[string]struct{}] // replaced, never modified
	mu    sync.Mutex                          // held to replace seen
}

// newLabelValues returns a set of at most limit values; limit < 0 means no
// limit (nil).
func newLabelValues(limit int) *labelValues {
	if limit < 0 {
		return nil
	}
	l := &labelValues{limit: limit}
	l.seen.Store(&map[string]struct{}{})
	return l
}

// bound returns v if it is in the set or the set has room for it (then it is
// added), [LabelValueOther] otherwise.
func (l *labelValues) bound(v string) string {
	if l == nil {
		return v
	}
	if _, ok := (*l.seen.Load())[v]; ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := *l.seen.Load()
	if _, ok := seen[v]; ok {
		return v
	}
	if len(seen) >= l.limit {
		return LabelValueOther
	}
	// Copy on write: at most limit copies, of at most limit values, over
	// the process's life.
	next := make(map[string]struct{}, len(seen)+1)
	maps.Copy(next, seen)
	next[v] = struct{}{}
	l.seen.Store(&next)
	return v
}
