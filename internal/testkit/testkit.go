// Package testkit holds the helpers Warden's tests share: waiting until a
// state is reached, a free TCP port, comparing JSON values, the CPU time
// benchmarks report. Tests and test
// tools only; it imports nothing of Warden's.
package testkit

import (
	"encoding/json"
	"net"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// Eventually polls cond until it holds and fails the test when it still
// does not after timeout, naming what it waited for. It asserts no timing:
// timeout bounds only the wait, and is meant to be generous (the machines
// are shared and often loaded). The polls start 10 ms apart and slow down
// to one every 100 ms, so a quick state is seen quickly and a slow one
// costs its API server little.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(interval)
		interval = min(2*interval, 100*time.Millisecond)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// JSONEqual reports whether a and b hold equal JSON values (object keys in
// any order); a document that is not JSON fails the test.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON (%v): %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("not JSON (%v): %s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

// CPUTime is the CPU time the process has used so far. Benchmarks report
// their CPU per operation with it (the difference over b.N, as a
// "cpu-ns/op" metric): on a shared machine it moves less with the load than
// wall time does.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
