// Command probe is the test image of the local cluster (hack/local-cluster.sh
// imports it as localhost/warden/probe:1): a static binary with no shell, so
// every check runs as one of its subcommands, directly or with kubectl exec.
//
//	probe serve [-addr :8080]           HTTP server: GET / answers the pod's hostname
//	probe get [-timeout 30s] URL        GET URL until it answers 200, print the body
//	probe lookup [-server HOST:PORT] [-timeout 30s] NAME
//	                                    resolve NAME until it resolves, print its addresses
//	probe sleep                         wait for SIGINT or SIGTERM (a pod to exec into)
//	probe write FILE TEXT               write TEXT and a newline to FILE
//	probe cat FILE                      print FILE
//
// get and lookup retry every half second until their timeout, then exit 1
// with the last error; a bad command line exits 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

const usage = `usage:
  probe serve [-addr :8080]
  probe get [-timeout 30s] URL
  probe lookup [-server HOST:PORT] [-timeout 30s] NAME
  probe sleep
  probe write FILE TEXT
  probe cat FILE`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("probe "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":8080", "listen `address` (serve)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this `long` (get, lookup)")
	server := fs.String("server", "", "DNS server `host:port` to ask instead of the system's (lookup)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch cmd := args[0]; {
	case cmd == "serve" && fs.NArg() == 0:
		err = serve(ctx, *addr, stderr)
	case cmd == "get" && fs.NArg() == 1:
		err = retry(ctx, *timeout, func(ctx context.Context) error { return get(ctx, fs.Arg(0), stdout) })
	case cmd == "lookup" && fs.NArg() == 1:
		err = retry(ctx, *timeout, func(ctx context.Context) error { return lookup(ctx, *server, fs.Arg(0), stdout) })
	case cmd == "sleep" && fs.NArg() == 0:
		<-ctx.Done()
	case cmd == "write" && fs.NArg() == 2:
		err = os.WriteFile(fs.Arg(0), []byte(fs.Arg(1)+"\n"), 0o644)
	case cmd == "cat" && fs.NArg() == 1:
		var data []byte
		if data, err = os.ReadFile(fs.Arg(0)); err == nil {
			_, err = stdout.Write(data)
		}
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "probe %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// serve answers GET / with the hostname until ctx ends.
func serve(ctx context.Context, addr string, log io.Writer) error {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, host)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintf(log, "probe serve: listening on %s as %s\n", addr, host)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// retry calls f until it succeeds, ctx ends or timeout passes, and returns
// f's last error.
func retry(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		err := f(attempt)
		cancelAttempt()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	_, err = out.Write(body)
	return err
}

func lookup(ctx context.Context, server, name string, out io.Writer) error {
	r := net.DefaultResolver
	if server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		return err
	}
	sort.Strings(addrs)
	_, err = fmt.Fprintln(out, strings.Join(addrs, " "))
	return err
}
