// Command reloadbench measures hot reload against a running policy server
// whose --policies file it rewrites. It serves the figures of
// docs/benchmarks.md (hack/bench.sh reload starts the server):
//
//   - latency: the time from renaming a new policies file into place to the
//     new version answering, polled as fast as one client can;
//   - load: the latency of 20 clients with no reload, then with a reload
//     every second, in the same run;
//   - rss: the server's resident memory before and after swapping the policy
//     100 times between two modules.
//
// The policy is "p", with module -module (and -module2 for rss); version i
// denies the label v<i>, which tells when the server serves it.
//
//	go run ./hack/reloadbench -policies /tmp/policies.yml -module /tmp/labels.wasm \
//	  -url https://127.0.0.1:3000 -cacert tls.crt -pid 1234 latency
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type bench struct {
	policies, module, module2, url string
	pid                            int
	duration                       time.Duration
	client                         *http.Client
	version                        int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reloadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := &bench{}
	fs.StringVar(&b.policies, "policies", "", "the server's --policies file")
	fs.StringVar(&b.module, "module", "", "path of the policy's wasm module")
	fs.StringVar(&b.module2, "module2", "", "path of a second module (rss)")
	fs.StringVar(&b.url, "url", "https://127.0.0.1:3000", "the server's base URL")
	cacert := fs.String("cacert", "", "CA certificate of the server")
	fs.IntVar(&b.pid, "pid", 0, "the server's process id (rss)")
	fs.DurationVar(&b.duration, "d", 10*time.Second, "duration of each load run")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || b.policies == "" || b.module == "" {
		fmt.Fprintln(stderr, "usage: reloadbench -policies F -module M [-module2 M2 -pid P] [-url U -cacert C] latency|load|rss")
		return 2
	}
	pem, err := os.ReadFile(*cacert)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	b.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}}
	switch fs.Arg(0) {
	case "latency":
		err = b.latency(stdout)
	case "load":
		err = b.load(stdout)
	case "rss":
		err = b.rss(stdout)
	default:
		err = fmt.Errorf("unknown measurement %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "reloadbench:", err)
		return 1
	}
	return 0
}

// write renames a new version of the policies file into place, with
// module, and returns the label that version denies.
func (b *bench) write(module string) (string, error) {
	b.version++
	label := fmt.Sprintf("v%d", b.version)
	doc := fmt.Sprintf("p:\n  module: file://%s\n  settings: {denied_labels: [%s]}\n", module, label)
	tmp := b.policies + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		return "", err
	}
	return label, os.Rename(tmp, b.policies)
}

// verdict sends a Pod carrying label and says whether it was accepted.
func (b *bench) verdict(label string) (bool, error) {
	body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",`+
		`"kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"default",`+
		`"object":{"metadata":{"name":"p","labels":{%q:"x"}}}}}`, label)
	resp, err := b.client.Post(b.url+"/validate/p", "application/json", strings.NewReader(body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %d: %s", resp.StatusCode, out)
	}
	return bytes.Contains(out, []byte(`"allowed":true`)), nil
}

// swap writes a new version and waits until it answers; it returns how long
// that took from the rename.
func (b *bench) swap(module string) (time.Duration, error) {
	label, err := b.write(module)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for time.Since(start) < time.Minute {
		accepted, err := b.verdict(label)
		if err != nil {
			return 0, err
		}
		if !accepted {
			return time.Since(start), nil
		}
	}
	return 0, errors.New("the new version never answered")
}

func (b *bench) latency(stdout io.Writer) error {
	if _, err := b.swap(b.module); err != nil { // the module is compiled and cached
		return err
	}
	var times []time.Duration
	for range 20 {
		d, err := b.swap(b.module)
		if err != nil {
			return err
		}
		times = append(times, d)
	}
	slices.Sort(times)
	fmt.Fprintf(stdout, "rename to new version answering, 20 reloads: min %v, median %v, p90 %v, max %v\n",
		ms(times[0]), ms(times[len(times)/2]), ms(times[len(times)*9/10]), ms(times[len(times)-1]))
	return nil
}

func (b *bench) load(stdout io.Writer) error {
	if _, err := b.swap(b.module); err != nil {
		return err
	}
	for _, reload := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), b.duration)
		var mu sync.Mutex
		var lat []time.Duration
		errs := 0
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					accepted, err := b.verdict("unrelated")
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					if err != nil || !accepted {
						errs++
					}
					mu.Unlock()
				}
			})
		}
		reloads := 0
		if reload {
			tick := time.NewTicker(time.Second)
		loop:
			for {
				select {
				case <-ctx.Done():
					break loop
				case <-tick.C:
					if _, err := b.write(b.module); err != nil {
						cancel()
						return err
					}
					reloads++
				}
			}
			tick.Stop()
		}
		wg.Wait()
		cancel()
		slices.Sort(lat)
		fmt.Fprintf(stdout, "%d reloads: %d requests (%.0f req/s), p50 %v, p99 %v, max %v, %d errors\n",
			reloads, len(lat), float64(len(lat))/b.duration.Seconds(), ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]), errs)
	}
	return nil
}

func (b *bench) rss(stdout io.Writer) error {
	if b.module2 == "" || b.pid == 0 {
		return errors.New("rss needs -module2 and -pid")
	}
	// Both modules compiled once (and in the disk cache) before measuring.
	for _, m := range []string{b.module2, b.module} {
		if _, err := b.swap(m); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	before, err := rssMiB(b.pid)
	if err != nil {
		return err
	}
	var times []time.Duration
	for i := range 100 {
		d, err := b.swap([]string{b.module2, b.module}[i%2])
		if err != nil {
			return err
		}
		times = append(times, d)
	}
	time.Sleep(2 * time.Second)
	after, err := rssMiB(b.pid)
	if err != nil {
		return err
	}
	slices.Sort(times)
	fmt.Fprintf(stdout, "100 module swaps: rename to new version answering median %v, p90 %v, max %v; RSS before %d MiB, after %d MiB\n",
		ms(times[len(times)/2]), ms(times[len(times)*9/10]), ms(times[len(times)-1]), before, after)
	return nil
}

func rssMiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
