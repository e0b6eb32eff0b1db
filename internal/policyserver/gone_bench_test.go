package policyserver

import (
	"context"
	"net"
	"net/http"
	"testing"
)

// BenchmarkWatchClient is what watching a request's connection costs a
// request that is answered before the first look at it: a context and a
// timer, no system call.
func BenchmarkWatchClient(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	conn, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	r, _ := http.NewRequestWithContext(withConn(context.Background(), conn), http.MethodPost, "/", nil)
	for b.Loop() {
		ctx, stop := watchClient(r)
		if ctx.Err() != nil {
			b.Fatal("the client is here")
		}
		stop()
	}
}
