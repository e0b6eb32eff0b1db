package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wardenhq/warden/internal/rego/regotest"
	"github.com/wardenhq/warden/internal/testkit"
	"github.com/wardenhq/warden/internal/wasm"
)

const regoDir = "../../testdata/rego/"

func newOPA(t testing.TB, rt *wasm.Runtime, file, entrypoint, data string, maxIdle int) *wasm.OPA {
	t.Helper()
	m, err := rt.CompileOPA(context.Background(), regotest.Build(t, regoDir+file, entrypoint))
	if err != nil {
		t.Fatal(err)
	}
	o, err := rt.NewOPA(context.Background(), m, []byte(data), maxIdle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close(context.Background()) })
	return o
}

// fakeBuiltins answers sprintf with its arguments joined by "|" and leaves
// every other builtin undefined; it records the calls.
type fakeBuiltins struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (f *fakeBuiltins) call(name string, args [][]byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var parts []string
	for _, a := range args {
		parts = append(parts, string(a))
	}
	f.calls = append(f.calls, name+"("+strings.Join(parts, "; ")+")")
	if f.fail != nil {
		return nil, f.fail
	}
	if name != "sprintf" {
		return nil, nil
	}
	return fmt.Appendf(nil, "%q", strings.Join(parts, "|")), nil
}

func TestOPAEval(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{"greeting":"hello"}`, 2)
	if got, want := strings.Join(o.Builtins(), ","), "sprintf,units.parse_bytes"; got != want {
		t.Errorf("Builtins() = %s, want %s", got, want)
	}
	var f fakeBuiltins
	out, err := o.Eval(context.Background(), []byte(`{"name":"bob","size":"1Ki","members":["a","b\u0001",1]}`), f.call)
	if err != nil {
		t.Fatal(err)
	}
	// The fake sprintf echoes its arguments: the set and the control
	// character cross the boundary intact.
	want := `[{"result":{"count":3,"described":"\"%v\"|[{1, \"a\", \"b\\u0001\"}]","greeting":"\"%s, %s\"|[\"hello\", \"bob\"]","size":"undefined"}}]`
	if !testkit.JSONEqual(t, out, []byte(want)) {
		t.Errorf("result = %s\nwant       %s", out, want)
	}
	if len(f.calls) != 3 {
		t.Errorf("builtin calls = %q, want sprintf twice and units.parse_bytes once", f.calls)
	}
}

func TestOPAEvalErrors(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	tests := []struct {
		name, file, entrypoint, input string
		fail                          error
		want                          string
		abort                         bool
	}{
		{
			name: "conflicting rule values abort", file: "gatekeeper/conflict.rego", entrypoint: "conflict/violation",
			input: `{"review":{"object":{"spec":{"replicas":3}}}}`, want: "conflict", abort: true,
		},
		{
			name: "a failing host builtin stops the evaluation", file: "abi.rego", entrypoint: "abi/result",
			input: `{"name":"bob","size":"1","members":[]}`, fail: errors.New("boom"), want: ": boom",
		},
		{
			name: "input that is not JSON", file: "abi.rego", entrypoint: "abi/result",
			input: `{"name":`, want: "cannot parse the input",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOPA(t, rt, tt.file, tt.entrypoint, `{"greeting":"hi"}`, 1)
			f := &fakeBuiltins{fail: tt.fail}
			_, err := o.Eval(context.Background(), []byte(tt.input), f.call)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
			var abort *wasm.OPAAbortError
			if errors.As(err, &abort) != tt.abort {
				t.Errorf("error %T, want an OPAAbortError: %v", err, tt.abort)
			}
			// The failed instance is gone; the next evaluation gets a
			// good one.
			f.fail = nil
			if _, err := o.Eval(context.Background(), []byte(`{"name":"x","size":"1","members":[],"review":{"object":{"spec":{"replicas":20}}}}`), f.call); err != nil {
				t.Errorf("evaluation after the failure: %v", err)
			}
		})
	}
}

func TestOPADeadline(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "gatekeeper/loop.rego", "loop/violation", `{}`, 1)
	values := make([]string, 1000)
	for i := range values {
		values[i] = fmt.Sprint(i)
	}
	input := `{"review":{"object":{"spec":{"values":[` + strings.Join(values, ",") + `]}}}}`
	var f fakeBuiltins
	_, err := o.Eval(withTimeout(t, 100*time.Millisecond), []byte(input), f.call)
	if !errors.Is(err, wasm.ErrDeadlineExceeded) {
		t.Fatalf("error = %v, want ErrDeadlineExceeded", err)
	}
	out, err := o.Eval(context.Background(), []byte(`{"review":{"object":{"spec":{"values":[1,2]}}}}`), f.call)
	if err != nil || !testkit.JSONEqual(t, out, []byte(`[{"result":[]}]`)) {
		t.Errorf("evaluation after the deadline = %s, %v; want an empty violation set", out, err)
	}
}

// TestOPAIsolation checks that an evaluation sees nothing of the ones before
// it on the same instance, nor of those running beside it.
func TestOPAIsolation(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{"greeting":"hello"}`, 4)
	input := func(i int) string {
		members := make([]string, i%7)
		for j := range members {
			members[j] = fmt.Sprintf(`"m%d-%d"`, i, j)
		}
		return fmt.Sprintf(`{"name":"n%d","members":[%s]}`, i, strings.Join(members, ","))
	}
	var f fakeBuiltins
	want := map[int]string{}
	for i := range 7 { // each on the one idle instance, in turn
		out, err := o.Eval(context.Background(), []byte(input(i)), f.call)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = string(out)
	}
	type answer struct {
		input int
		out   []byte
		err   error
	}
	var wg sync.WaitGroup
	answers := make(chan answer, 70)
	for g := range 10 {
		wg.Go(func() {
			for k := range 7 {
				i := (g + k) % 7
				out, err := o.Eval(context.Background(), []byte(input(i)), f.call)
				answers <- answer{i, out, err}
			}
		})
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil || !testkit.JSONEqual(t, a.out, []byte(want[a.input])) {
			t.Errorf("input %d: %s, %v; want %s", a.input, a.out, a.err, want[a.input])
		}
	}
}

func TestCompileOPARefuses(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MemoryLimitBytes: 4 * 65536})
	// A module importing env.memory with a minimum of 8 pages.
	bigMemory := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		2, 15, 1, 3, 'e', 'n', 'v', 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0, 8}
	tests := []struct {
		name   string
		module []byte
		want   string
	}{
		{"a module without env.memory", []byte{0, 'a', 's', 'm', 1, 0, 0, 0}, "not an OPA module"},
		{"a memory above the limit", bigMemory, "needs 8 pages, more than the limit of 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rt.CompileOPA(context.Background(), tt.module)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("a module compiled without CompileOPA", func(t *testing.T) {
		m, err := rt.Compile(context.Background(), regotest.Build(t, regoDir+"abi.rego", "abi/result"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.NewOPA(context.Background(), m, []byte(`{}`), 1); err == nil || !strings.Contains(err.Error(), "CompileOPA") {
			t.Fatalf("error = %v, want one naming CompileOPA", err)
		}
	})
}

// TestOPAEvalWithData: an instance parses a data document once and keeps
// it for every evaluation given the same OPAData, also when parsing it grew
// the instance's memory well past what the module needs; another document
// takes its place, and nothing of the old one remains.
func TestOPAEvalWithData(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{"greeting":"hello"}`, 1)
	var f fakeBuiltins
	ctx := context.Background()
	input := []byte(`{"name":"n","size":"1Ki","members":["a"]}`)
	eval := func(data wasm.OPAData) string {
		t.Helper()
		out, err := o.EvalWithData(ctx, input, data, f.call)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	loads := o.DataLoads() // NewOPA's
	before := eval(wasm.OPAData{})
	big := wasm.NewOPAData(fmt.Appendf(nil, `{"greeting":"big","padding":%q}`, strings.Repeat("x", 12<<20)))
	for range 3 {
		// The fake sprintf echoes its arguments.
		if out := eval(big); !strings.Contains(out, `[\"big\", \"n\"]`) {
			t.Fatalf("with the big data: %.200s", out)
		}
	}
	if n := o.DataLoads() - loads; n != 1 {
		t.Errorf("the big data was parsed %d times for 3 evaluations on one instance, want once", n)
	}
	if n := rt.LiveInstances(); n != 1 {
		t.Errorf("%d live instances, want the one grown by the big data", n)
	}
	// A document without a greeting: the old one's is gone.
	if out := eval(wasm.NewOPAData([]byte(`{"other":1}`))); !strings.Contains(out, `"greeting":"none"`) {
		t.Errorf("with data without a greeting: %s", out)
	}
	if after := eval(wasm.OPAData{}); !testkit.JSONEqual(t, []byte(after), []byte(before)) {
		t.Errorf("back to NewOPA's data: %s, want %s", after, before)
	}
	if n := o.DataLoads() - loads; n != 3 {
		t.Errorf("%d data loads for three documents in turn, want 3", n)
	}
	// A document the policy cannot parse fails the evaluation; the next one
	// gets a good instance.
	if _, err := o.EvalWithData(ctx, input, wasm.NewOPAData([]byte(`{"greeting":`)), f.call); err == nil ||
		!strings.Contains(err.Error(), "loading the policy data: the policy cannot parse the data") {
		t.Errorf("unparsable data: error = %v", err)
	}
	if after := eval(wasm.OPAData{}); !testkit.JSONEqual(t, []byte(after), []byte(before)) {
		t.Errorf("after unparsable data: %s, want %s", after, before)
	}
}

// TestOPADataVersions runs evaluations with two versions of the data at
// once: each gets the answer of its own version, and the idle instances
// that hold a version serve it without parsing it again.
func TestOPADataVersions(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{}`, 4)
	versions := []wasm.OPAData{
		wasm.NewOPAData([]byte(`{"greeting":"old"}`)),
		wasm.NewOPAData([]byte(`{"greeting":"new"}`)),
	}
	var f fakeBuiltins
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				v := (g + i) % 2
				out, err := o.EvalWithData(context.Background(), []byte(`{"name":"n"}`), versions[v], f.call)
				want := fmt.Sprintf(`[\"%s\", \"n\"]`, []string{"old", "new"}[v])
				if err != nil || !strings.Contains(string(out), want) {
					errs <- fmt.Errorf("version %d: %s, %v", v, out, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Serial evaluations of the new version, on idle instances: at most one
	// load per instance that did not hold it.
	loads := o.DataLoads()
	for range 20 {
		if _, err := o.EvalWithData(context.Background(), []byte(`{"name":"n"}`), versions[1], f.call); err != nil {
			t.Fatal(err)
		}
	}
	if n := o.DataLoads() - loads; n > 1 {
		t.Errorf("%d data loads for 20 serial evaluations of one version, want at most 1", n)
	}
}

// TestOPADataLoadOutlivesTheRequest: a request whose deadline passes while
// its instance parses a new version of the data fails, but the parse
// completes and the next request finds the data loaded.
func TestOPADataLoadOutlivesTheRequest(t *testing.T) {
	rt := newRuntime(t, wasm.Config{})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{}`, 1)
	var f fakeBuiltins
	data := wasm.NewOPAData([]byte(`{"greeting":"late"}`))
	loads := o.DataLoads()
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := o.EvalWithData(ctx, []byte(`{"name":"n"}`), data, f.call); !errors.Is(err, wasm.ErrDeadlineExceeded) {
		t.Fatalf("a request past its deadline: %v, want ErrDeadlineExceeded", err)
	}
	out, err := o.EvalWithData(context.Background(), []byte(`{"name":"n"}`), data, f.call)
	if err != nil || !strings.Contains(string(out), `[\"late\", \"n\"]`) {
		t.Fatalf("the next request: %s, %v", out, err)
	}
	if n := o.DataLoads() - loads; n != 1 {
		t.Errorf("%d data loads, want the one the late request started", n)
	}
}

// TestOPASnapshot: once evaluations of a document need more instances than
// hold it, further instances start from a snapshot of one that loaded it,
// without parsing it again, and each still evaluates its own input; the
// instances that parsed it are put on the snapshot; a new document gets a
// snapshot of its own. Serial evaluations take no snapshot.
func TestOPASnapshot(t *testing.T) {
	const parallel = 4
	// A runtime runs GOMAXPROCS-1 guest calls at once: enough slots for
	// the evaluations to hold their instances together.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(parallel + 1))
	rt := newRuntime(t, wasm.Config{})
	if rt.GuestSlots() < parallel {
		t.Fatalf("%d guest slots, want %d", rt.GuestSlots(), parallel)
	}
	o := newOPA(t, rt, "abi.rego", "abi/result", `{}`, parallel)
	// together runs parallel evaluations of data that are all inside the
	// module at once (each holds its instance until all have called a
	// builtin), and returns their results.
	together := func(data wasm.OPAData) []string {
		t.Helper()
		var inside sync.WaitGroup
		inside.Add(parallel)
		release := make(chan struct{})
		out := make([]string, parallel)
		errs := make([]error, parallel)
		var wg sync.WaitGroup
		for g := range parallel {
			// An evaluation that fails before its first builtin counts as
			// inside, so that the others are released.
			entered := sync.OnceFunc(inside.Done)
			var waited sync.Once
			var f fakeBuiltins
			wait := func(name string, args [][]byte) ([]byte, error) {
				waited.Do(func() { entered(); <-release })
				return f.call(name, args)
			}
			wg.Go(func() {
				defer entered()
				var b []byte
				b, errs[g] = o.EvalWithData(context.Background(), fmt.Appendf(nil, `{"name":"n%d"}`, g), data, wait)
				out[g] = string(b)
			})
		}
		inside.Wait()
		if n := rt.LiveInstances(); n < parallel {
			t.Errorf("%d live instances while %d evaluations run, want %d", n, parallel, parallel)
		}
		close(release)
		wg.Wait()
		o.WaitForSnapshots()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	check := func(out []string, greeting string) {
		t.Helper()
		for g, o := range out {
			if want := fmt.Sprintf(`[\"%s\", \"n%d\"]`, greeting, g); !strings.Contains(o, want) {
				t.Errorf("evaluation %d: %.200s, want it to contain %s", g, o, want)
			}
		}
	}

	// onSnapshot checks that the snapshot holds the document data and
	// that every idle instance maps it.
	onSnapshot := func(data wasm.OPAData) {
		t.Helper()
		if got := o.SnapshotDataID(); got != data.ID() {
			t.Errorf("the snapshot holds document %d, want %d", got, data.ID())
		}
		if on, idle := o.IdleOnSnapshot(); on != idle || idle == 0 {
			t.Errorf("%d of %d idle instances map the snapshot, want all", on, idle)
		}
	}

	// One evaluation at a time needs one instance, and no snapshot.
	// A document small enough to parse in less than the scheduler's longCall:
	// a long parse waits while short calls are busy, and these are, in
	// their builtins, until every evaluation is in.
	first := wasm.NewOPAData(fmt.Appendf(nil, `{"greeting":"first","padding":%q}`, strings.Repeat("x", 64<<10)))
	for range 3 {
		if _, err := o.EvalWithData(context.Background(), []byte(`{"name":"n"}`), first, (&fakeBuiltins{}).call); err != nil {
			t.Fatal(err)
		}
	}
	o.WaitForSnapshots()
	if got := o.SnapshotDataID(); got != 0 {
		t.Errorf("serial evaluations took a snapshot of document %d", got)
	}

	for _, doc := range []struct {
		data     wasm.OPAData
		greeting string
	}{{first, "first"}, {wasm.NewOPAData([]byte(`{"greeting":"second"}`)), "second"}} {
		// The evaluations that need an instance while the others are busy
		// parse the document; one of their instances is remembered.
		loads := o.DataLoads()
		check(together(doc.data), doc.greeting)
		if n := o.DataLoads() - loads; n < 1 || n > parallel {
			t.Errorf("%s document: %d data loads, want 1 to %d", doc.greeting, n, parallel)
		}
		// The next ones start from the snapshot, and put the instances
		// that parsed the document on it.
		loads = o.DataLoads()
		check(together(doc.data), doc.greeting)
		if n := o.DataLoads() - loads; n != 0 {
			t.Errorf("%s document, again: %d data loads, want 0", doc.greeting, n)
		}
		onSnapshot(doc.data)
		if n := rt.LiveInstances(); n > parallel {
			t.Errorf("%d live instances after the evaluations, want at most %d", n, parallel)
		}
	}
}

// BenchmarkOPANewData measures an evaluation with a new version of a large
// data document (10,000 objects, about 7 MB, as an inventory of 10,000
// RoleBindings): the parse, and the snapshot the next instances start from.
func BenchmarkOPANewData(b *testing.B) {
	rt := newRuntime(b, wasm.Config{})
	o := newOPA(b, rt, "abi.rego", "abi/result", `{}`, 1)
	var doc strings.Builder
	doc.WriteString(`{"greeting":"g","items":[`)
	for i := range 10000 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"metadata":{"name":"rb-%d","namespace":"ns-%d","labels":{"app":"x"}},"roleRef":{"kind":"ClusterRole","name":"view"},`+
			`"subjects":[{"kind":"User","name":"u-%d"},{"kind":"Group","name":"g-%d"},{"kind":"ServiceAccount","name":"sa","namespace":"ns-%d"}],"padding":%q}`,
			i, i%3000, i, i, i%3000, strings.Repeat("p", 400))
	}
	doc.WriteString(`]}`)
	raw := []byte(doc.String())
	var f fakeBuiltins
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := o.EvalWithData(context.Background(), []byte(`{"name":"n"}`), wasm.NewOPAData(raw), f.call); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOPAResultCap checks the cap on answers for Rego policies: a result
// over it is not read, and the evaluation fails naming the cap. The abi
// policy's result holds its input's members (through the fake sprintf).
func TestOPAResultCap(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MaxResponseBytes: 10000})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{"greeting":"hello"}`, 1)
	var f fakeBuiltins
	if _, err := o.Eval(context.Background(), []byte(`{"name":"bob","members":["a"]}`), f.call); err != nil {
		t.Fatalf("under the cap: %v", err)
	}
	input := []byte(`{"name":"bob","members":["` + strings.Repeat("x", 20000) + `"]}`)
	_, err := o.Eval(context.Background(), input, f.call)
	var tooLarge *wasm.ResponseTooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "over the limit of 10000 bytes per response") {
		t.Fatalf("over the cap: error = %v, want a *ResponseTooLargeError naming the cap", err)
	}
}

// TestOPABuiltinArgsCap checks that the arguments of a builtin left to the
// host are bounded by Config.MaxHostCallBytes, all of them together: past
// it the builtin does not run and the evaluation fails with an error that
// names the builtin and the limit; within it the builtin runs.
func TestOPABuiltinArgsCap(t *testing.T) {
	rt := newRuntime(t, wasm.Config{MaxHostCallBytes: 100})
	o := newOPA(t, rt, "abi.rego", "abi/result", `{"greeting":"hi"}`, 1)
	tests := []struct {
		name  string
		input string
		want  string // in the error; "" for none
	}{
		// sprintf's arguments: "%s, %s" and ["hi", "<name>"].
		{name: "within the cap", input: `{"name":"` + strings.Repeat("x", 60) + `","size":"1","members":[]}`},
		{name: "the second argument crosses it", input: `{"name":"` + strings.Repeat("x", 90) + `","size":"1","members":[]}`,
			want: "the arguments of the builtin sprintf are over the limit of 100 bytes per builtin call (--max-host-call-payload-bytes)"},
		{name: "far over it", input: `{"name":"` + strings.Repeat("x", 1<<20) + `","size":"1","members":[]}`,
			want: "the arguments of the builtin sprintf are over the limit of 100 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fakeBuiltins
			_, err := o.Eval(context.Background(), []byte(tt.input), f.call)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var tooLarge *wasm.BuiltinArgsTooLargeError
			if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want a BuiltinArgsTooLargeError with %q", err, tt.want)
			}
			for _, call := range f.calls {
				if strings.Contains(call, "xxxxxxxxxx") {
					t.Errorf("the builtin ran with the arguments over the cap: %.80s", call)
				}
			}
		})
	}
}
