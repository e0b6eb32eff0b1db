package policyfetch

import (
	"context"
	"errors"
	"net"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// nxdomainServer answers every DNS query sent to the address it returns,
// on 127.0.0.1, with "no such name", until the test ends.
func nxdomainServer(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return // closed at cleanup
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired,
				RecursionAvailable: true, RCode: dnsmessage.RCodeNameError})
			if b.StartQuestions() != nil || b.Question(q) != nil {
				continue
			}
			if answer, err := b.Finish(); err == nil {
				_, _ = pc.WriteTo(answer, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// loopbackResolver sends every DNS query to addr, whatever name server the
// system's configuration names, so that no lookup leaves the machine.
func loopbackResolver(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// silentResolver stands for a name server that never answers: every query
// times out at once, as it would after the resolver's timeout.
func silentResolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, context.DeadlineExceeded
	}}
}

// TestFetchNamesAnUnresolvableHost checks that a host name that does not
// resolve is named as the cause, also when the lookup timed out: a timeout
// of the net package is also context.DeadlineExceeded, which used to
// reduce the error to "gave up: context deadline exceeded". The names are
// under .invalid (RFC 6761) and looked up on 127.0.0.1 only.
func TestFetchNamesAnUnresolvableHost(t *testing.T) {
	nx := loopbackResolver(nxdomainServer(t))
	tests := []struct {
		name, uri string
		resolver  *net.Resolver
		wantErr   string
	}{
		{name: "registry, no such host", uri: "registry://registry.invalid/policies/x:v1", resolver: nx,
			wantErr: "fetching registry://registry.invalid/policies/x:v1: cannot resolve registry.invalid: no such host"},
		{name: "registry, name server silent", uri: "registry://registry.invalid/policies/x:v1", resolver: silentResolver(),
			wantErr: "fetching registry://registry.invalid/policies/x:v1: cannot resolve registry.invalid: i/o timeout"},
		{name: "https, no such host", uri: "https://modules.invalid/p.wasm", resolver: nx,
			wantErr: "fetching https://modules.invalid/p.wasm: cannot resolve modules.invalid: no such host"},
		{name: "https, name server silent", uri: "https://modules.invalid/p.wasm", resolver: silentResolver(),
			wantErr: "fetching https://modules.invalid/p.wasm: cannot resolve modules.invalid: i/o timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, nil, "")
			f.tr.resolver = tc.resolver
			_, err := f.Fetch(context.Background(), tc.uri)
			checkErr(t, err, tc.wantErr)
			var dns *net.DNSError
			if !errors.As(err, &dns) {
				t.Errorf("error %v does not hold the *net.DNSError", err)
			}
		})
	}
}
