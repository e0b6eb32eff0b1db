package scalebench

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// The benchmark's report: what it measured of each server (the policy
// server of each scenario and the informer baseline) and of each load run,
// written as markdown, which reads as well in a terminal as in
// docs/benchmarks.md.

// loadResult is one run of the load tool against one target.
type loadResult struct {
	Target  string  // what was loaded: a policy id, or the informer's list
	Clients int     // closed loop: workers; open loop: at most in flight
	Rate    float64 // open loop: offered req/s; 0 for closed loop
	// Compare names the informer target this one is measured against, in
	// the same scenario and with the same load ("" for none).
	Compare string

	Requests, Errors uint64 // measured requests (warm-up excluded), failed ones
	RPS              float64
	P50, P95, P99    time.Duration
	// CPUPerRequest is the server's CPU time (user + system) over the run,
	// warm-up included, divided by the requests of the run, warm-up included.
	CPUPerRequest time.Duration
	PeakRSS       int64 // the highest RSS sampled during the run
	FirstErrors   []string
}

// load returns the load's description: "1 client", "20 clients", "20 req/s".
func (l loadResult) load() string {
	switch {
	case l.Rate > 0:
		return fmt.Sprintf("%g req/s", l.Rate)
	case l.Clients == 1:
		return "1 client"
	default:
		return fmt.Sprintf("%d clients", l.Clients)
	}
}

// serverResult is what was measured of one server process.
type serverResult struct {
	Scenario string
	Server   string // "warden" or "informer"
	// Ready runs from the start of the process until its readiness
	// endpoint answered 200; FirstAnswer until the first request of the
	// first target was answered without error (a list policy checks that
	// it sees the whole population).
	Ready, FirstAnswer time.Duration
	StartupCPU         time.Duration // CPU used until FirstAnswer
	ReadyPeakRSS       int64         // the highest RSS sampled until Ready: the initial lists
	StartupPeakRSS     int64         // the highest RSS sampled until FirstAnswer
	IdleRSS            int64         // RSS a second after FirstAnswer
	End                memory        // RSS and VmHWM after the last load
	DBReady, DBEnd     dbSize        // the reflector store, at FirstAnswer and at the end
	Loads              []loadResult
	// Problems are the log lines at level WARN or ERROR and anything
	// wrong with the process (an exit, a failed request).
	Problems []string
}

// report is the whole benchmark's outcome.
type report struct {
	Header  []string // lines about the machine, the command and the populations
	Setup   []string // lines about the creation of the populations
	Servers []serverResult
}

func mib(b int64) string {
	switch {
	case b <= 0:
		return "-"
	case b < 10<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
}

func ms(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

func secs(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func (s dbSize) String() string {
	if s.DB == 0 && s.WAL == 0 {
		return "-"
	}
	wal := mib(s.WAL)
	if s.WAL == 0 {
		wal = "0"
	}
	return fmt.Sprintf("%s + %s WAL", mib(s.DB), wal)
}

// writeMarkdown writes the report.
func (r *report) writeMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Scale benchmark\n\n")
	for _, l := range r.Header {
		p("%s\n", l)
	}
	if len(r.Setup) > 0 {
		p("\n")
		for _, l := range r.Setup {
			p("- %s\n", l)
		}
	}

	p("\n### Start-up and memory\n\n")
	p("| scenario | server | ready | first answer | CPU to first answer | peak RSS to ready | peak RSS to first answer | RSS idle | RSS end | VmHWM end | reflector DB (ready / end) |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Servers {
		db := "-"
		if s.Server == "warden" {
			db = s.DBReady.String() + " / " + s.DBEnd.String()
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Scenario, s.Server, secs(s.Ready), secs(s.FirstAnswer),
			secs(s.StartupCPU), mib(s.ReadyPeakRSS), mib(s.StartupPeakRSS), mib(s.IdleRSS), mib(s.End.RSS), mib(s.End.HWM), db)
	}

	p("\n### Load\n\n")
	p("| scenario | server | target | load | req/s | p50 | p95 | p99 | server CPU/req | peak RSS | errors |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Servers {
		for _, l := range s.Loads {
			p("| %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %d/%d |\n", s.Scenario, s.Server, l.Target, l.load(),
				l.RPS, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.CPUPerRequest), mib(l.PeakRSS), l.Errors, l.Requests)
		}
	}

	if rows := r.ratios(); len(rows) > 0 {
		p("\n### Warden / informer, same lists, same load\n\n")
		p("| scenario | warden target | informer target | load | req/s ratio | p95 ratio | CPU/req ratio | note |\n")
		p("|---|---|---|---|---|---|---|---|\n")
		for _, row := range rows {
			p("%s\n", row)
		}
	}

	var problems []string
	for _, s := range r.Servers {
		for _, pr := range s.Problems {
			problems = append(problems, fmt.Sprintf("%s/%s: %s", s.Scenario, s.Server, pr))
		}
		for _, l := range s.Loads {
			for _, e := range l.FirstErrors {
				problems = append(problems, fmt.Sprintf("%s/%s %s %s: %s", s.Scenario, s.Server, l.Target, l.load(), e))
			}
		}
	}
	if len(problems) > 0 {
		p("\n### Problems\n\n")
		for _, pr := range problems {
			p("- %s\n", strings.ReplaceAll(pr, "\n", " "))
		}
	}
}

// minRequests is the fewest measured requests of a run whose ratio is not
// flagged as unreliable.
const minRequests = 20

// ratios returns a table row for each Warden load that names an informer
// target measured with the same load in the same scenario.
func (r *report) ratios() []string {
	type key struct {
		scenario, target string
		clients          int
		rate             float64
	}
	informer := map[key]loadResult{}
	for _, s := range r.Servers {
		if s.Server != "informer" {
			continue
		}
		for _, l := range s.Loads {
			informer[key{s.Scenario, l.Target, l.Clients, l.Rate}] = l
		}
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	var rows []string
	for _, s := range r.Servers {
		if s.Server != "warden" {
			continue
		}
		for _, l := range s.Loads {
			b, ok := informer[key{s.Scenario, l.Compare, l.Clients, l.Rate}]
			if l.Compare == "" || !ok {
				continue
			}
			var notes []string
			if l.Errors > 0 || b.Errors > 0 {
				notes = append(notes, fmt.Sprintf("failed requests: warden %d, informer %d", l.Errors, b.Errors))
			}
			if min(l.Requests, b.Requests) < minRequests {
				notes = append(notes, fmt.Sprintf("under %d requests measured", minRequests))
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |", s.Scenario, l.Target, b.Target, l.load(),
				ratio(l.RPS, b.RPS), ratio(float64(l.P95), float64(b.P95)), ratio(float64(l.CPUPerRequest), float64(b.CPUPerRequest)),
				strings.Join(notes, "; ")))
		}
	}
	return rows
}

func TestReportMarkdown(t *testing.T) {
	r := &report{
		Header: []string{"machine: 2 CPUs"},
		Setup:  []string{"3000 Namespaces created in 12.0 s"},
		Servers: []serverResult{
			{Scenario: "pods", Server: "warden", Ready: 3700 * time.Millisecond, FirstAnswer: 4 * time.Second,
				ReadyPeakRSS: 150 << 20, StartupPeakRSS: 911 << 20, DBReady: dbSize{DB: 40 << 20, WAL: 40 << 20},
				Loads: []loadResult{
					{Target: "pods-ns", Compare: "namespace", Clients: 20, Requests: 560, RPS: 56, P95: 400 * time.Millisecond, CPUPerRequest: 30 * time.Millisecond},
					{Target: "pods-ns", Compare: "namespace", Rate: 20, Clients: 64, Requests: 200, RPS: 20, Errors: 2, FirstErrors: []string{"status 500"}},
				},
				Problems: []string{"level=WARN msg=slow"}},
			{Scenario: "pods", Server: "informer", Ready: time.Second,
				Loads: []loadResult{
					{Target: "namespace", Clients: 20, Requests: 1180, RPS: 118, P95: 200 * time.Millisecond, CPUPerRequest: 15 * time.Millisecond},
					{Target: "namespace", Rate: 20, Clients: 64, Requests: 10, RPS: 20},
				}},
		},
	}
	var b bytes.Buffer
	r.writeMarkdown(&b)
	out := b.String()
	t.Log(out)
	for _, want := range []string{
		"| pods | warden | 3.70 s | 4.00 s | - | 150 MiB | 911 MiB | - | - | - | 40 MiB + 40 MiB WAL / - |",
		"| pods | warden | pods-ns | 20 clients | 56.0 | - | 400.0 ms | - | 30.0 ms | - | 0/560 |",
		"| pods | warden | pods-ns | 20 req/s | 20.0 |",
		"| pods | pods-ns | namespace | 20 clients | 0.47x | 2.00x | 2.00x |  |",
		"| pods | pods-ns | namespace | 20 req/s | 1.00x | - | - | failed requests: warden 2, informer 0; under 20 requests measured |",
		"- pods/warden: level=WARN msg=slow",
		"- pods/warden pods-ns 20 req/s: status 500",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if strings.Count(out, "| pods | pods-ns | namespace |") != 2 {
		t.Errorf("want a ratio row for each load of both servers:\n%s", out)
	}
}
