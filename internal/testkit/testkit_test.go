package testkit

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder records a fatal failure instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// failure runs fn with a recorder and returns the fatal message, if any.
func failure(t *testing.T, fn func(testing.TB)) (msg string) {
	r := &fatalRecorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		msg = r.msg
	}()
	fn(r)
	return ""
}

func TestEventually(t *testing.T) {
	var polls atomic.Int32
	Eventually(t, time.Minute, "the third poll", func() bool { return polls.Add(1) >= 3 })
	if n := polls.Load(); n != 3 {
		t.Errorf("%d polls, want 3", n)
	}
	msg := failure(t, func(tb testing.TB) {
		Eventually(tb, 30*time.Millisecond, "never", func() bool { return false })
	})
	if !strings.Contains(msg, "timed out after") {
		t.Errorf("a condition that never holds failed with %q, want a time-out", msg)
	}
}

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Errorf("FreePort = %d", p)
	}
}

func TestJSONEqual(t *testing.T) {
	if !JSONEqual(t, []byte(`{"a":1,"b":[1,2]}`), []byte(`{"b":[1,2], "a":1.0}`)) {
		t.Error("equal values in another order are not equal")
	}
	if JSONEqual(t, []byte(`{"a":1}`), []byte(`{"a":2}`)) {
		t.Error("different values are equal")
	}
	if msg := failure(t, func(tb testing.TB) { JSONEqual(tb, []byte(`{`), []byte(`{}`)) }); !strings.Contains(msg, "not JSON") {
		t.Errorf("a document that is not JSON failed with %q", msg)
	}
}
