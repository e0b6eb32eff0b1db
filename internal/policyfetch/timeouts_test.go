package policyfetch

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stall serves a module whose server stops sending after the headers and a
// few bytes (stall), sends one byte every 20 ms without end (trickle), or
// never answers at all (silent), until the test ends.
func stallServer(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stall.wasm", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write(wasm("st"))
		w.(http.Flusher).Flush()
		<-release
	})
	mux.HandleFunc("GET /trickle.wasm", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write(wasm(""))
		for {
			select {
			case <-release:
				return
			case <-time.After(20 * time.Millisecond):
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
			}
		}
	})
	mux.HandleFunc("GET /silent.wasm", func(http.ResponseWriter, *http.Request) { <-release })
	host := serve(t, mux, nil)
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for the handlers
	return host
}

func TestFetchTimeouts(t *testing.T) {
	host := stallServer(t)
	// A listener that accepts connections and never speaks: a TLS
	// handshake with it never ends.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	tests := []struct {
		name, uri string
		opts      Options
		wantErr   string
	}{
		{name: "no byte for the idle timeout", uri: "http://" + host + "/stall.wasm", opts: Options{IdleTimeout: 300 * time.Millisecond},
			wantErr: "...no byte received from " + host + " for 300ms (the fetch idle timeout)"},
		{name: "no answer for the idle timeout", uri: "http://" + host + "/silent.wasm", opts: Options{IdleTimeout: 300 * time.Millisecond},
			wantErr: "...no byte received from " + host + " for 300ms (the fetch idle timeout)"},
		{name: "a trickle past the fetch timeout", uri: "http://" + host + "/trickle.wasm", opts: Options{Timeout: time.Second},
			wantErr: "...gave up after 1s (the fetch timeout)"},
		{name: "a handshake past the connect timeout", uri: "https://" + mute.Addr().String() + "/x.wasm", opts: Options{ConnectTimeout: 300 * time.Millisecond},
			wantErr: "...cannot connect to " + mute.Addr().String() + " within 300ms (the fetch connect timeout)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.StoreDir = t.TempDir()
			tc.opts.Sources = insecure(host)
			f, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// Bounds the test only: without the fetcher's timeouts the
			// fetch would end here, with another error.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = f.Fetch(ctx, tc.uri)
			checkErr(t, err, tc.wantErr)
			if err != nil && strings.Contains(err.Error(), "gave up: context deadline exceeded") {
				t.Errorf("the test's own bound ended the fetch: %v", err)
			}
		})
	}
}
