package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wardenhq/warden/internal/policyserver"
)

// tryRequest is an example request the runner suggests sending.
type tryRequest struct {
	// Policy is the id of the policy in policies.yml.
	Policy string
	// File is the AdmissionReview, in the requests directory.
	File string
	// Outcome says what the answer shows.
	Outcome string
}

// tryRequests are the requests the runner suggests, in order.
var tryRequests = []tryRequest{
	{Policy: "pod-privileged", File: "privileged-pod.json", Outcome: `rejected: "Privileged container is not allowed"`},
	{Policy: "pod-privileged", File: "unprivileged-pod.json", Outcome: "allowed"},
	{Policy: "pod-privileged-monitor", File: "privileged-pod.json", Outcome: "allowed: monitor mode only logs the rejection"},
	{Policy: "deny-latest-tag", File: "latest-tag-pod.json", Outcome: "rejected: the log-shipper container uses fluent/fluent-bit:latest (the policy logs each evaluation)"},
	{Policy: "default-team-label", File: "pod-without-team.json", Outcome: "allowed with a JSONPatch adding the label team: platform (response.patch is base64)"},
	{Policy: "pod-team-label", File: "pod-without-team.json", Outcome: "rejected by native CEL: the pod has no team label (code 403)"},
	{Policy: "pod-hardening", File: "privileged-pod.json", Outcome: "rejected by the group, with the privileged-container member as the cause"},
}

// instructions returns the text printed once the server is ready: where it
// listens and the curl commands of tryRequests. display turns a path
// relative to the repository root into the path to print.
func instructions(opts policyserver.Options, l layout, display func(string) string) string {
	tls := l.tlsFiles()
	port := strconv.Itoa(opts.Port)
	if opts.Port == 0 {
		port = "<port>"
	}
	base := "https://" + net.JoinHostPort(dialHost(opts.Addr), port)

	var b strings.Builder
	fmt.Fprintf(&b, "\nWarden's policy server is serving %s:\n", display(opts.PoliciesPath))
	fmt.Fprintf(&b, "  webhook          %s/validate/<policy id>\n", base)
	if u := readinessURL(opts); u != "" {
		fmt.Fprintf(&b, "  readiness        %s\n", u)
		fmt.Fprintf(&b, "  metrics          %s\n", strings.TrimSuffix(u, "/readiness")+"/metrics")
	}
	fmt.Fprintf(&b, "  CA certificate   %s\n", display(tls.CA))
	if opts.Port == 0 {
		b.WriteString("  (--port 0: the log line \"policy server listening\" has the port)\n")
	}

	where := "From another terminal:"
	if !filepath.IsAbs(display(l.Requests)) {
		where = "From another terminal, in this directory:"
	}
	fmt.Fprintf(&b, "\n%s\n", where)
	for _, r := range tryRequests {
		fmt.Fprintf(&b, "\n  # %s => %s\n", r.Policy, r.Outcome)
		fmt.Fprintf(&b, "  curl -sS -w '\\n' --cacert %s -H 'Content-Type: application/json' --data %s %s/validate/%s\n",
			shellQuote(display(tls.CA)), shellQuote("@"+display(filepath.Join(l.Requests, r.File))), base, r.Policy)
	}
	b.WriteString("\nCtrl-C stops the server.\n")
	return b.String()
}

// dialHost is the host a client on this machine connects to for a server
// bound to addr.
func dialHost(addr string) string {
	ip := net.ParseIP(addr)
	switch {
	case addr == "" || ip != nil && ip.Equal(net.IPv4zero):
		return "127.0.0.1"
	case ip != nil && ip.Equal(net.IPv6unspecified):
		return "::1"
	}
	return addr
}

// readinessURL is the URL of the server's readiness endpoint, or "" when its
// port is not known in advance (0).
func readinessURL(opts policyserver.Options) string {
	if opts.ReadinessProbePort == 0 {
		return ""
	}
	return "http://" + net.JoinHostPort(dialHost(opts.Addr), strconv.Itoa(opts.ReadinessProbePort)) + "/readiness"
}

// announce writes text to w once readiness (a URL) answers 200 OK, or at
// once when readiness is "". It gives up silently when ctx is done.
func announce(ctx context.Context, w io.Writer, readiness, text string) {
	if readiness != "" && !waitReady(ctx, readiness) {
		return
	}
	io.WriteString(w, text)
}

// waitReady polls url until it answers 200 OK (true) or ctx is done (false).
func waitReady(ctx context.Context, url string) bool {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ctx.Err() == nil
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// displayPath returns path (relative to root, or absolute) as the user
// should type it in wd: relative to wd when it is under wd, else absolute.
func displayPath(wd, root, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}

// displayDir is displayPath for a directory: with a trailing separator.
func displayDir(wd, root, dir string) string {
	return displayPath(wd, root, dir) + string(filepath.Separator)
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./_-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
