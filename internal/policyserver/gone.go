package policyserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// A client that hangs up is noticed by net/http only when it sent nothing
// after the request being served: net/http watches the connection for the
// end of its input and cancels the request's context then. A client that
// pipelined further requests on the connection (HTTP/1.1 pipelining) and
// closed it leaves the request's context alive: net/http reads one byte of
// the next request and stops watching (net/http's connReader.backgroundRead
// says why), and learns of the close only when a response fails to write,
// after the evaluation ran. 20,000 pipelined requests on connections
// closed at once then ran 12,688 evaluations nobody read (issue 31).
//
// So each request's context is also cancelled, with errClientGone as its
// cause, once its connection's peer has closed its side: the kernel says
// so (TCP_INFO, peerClosed) whatever input is left unread. A request looks
// at its connection every goneCheckInterval while it is served (a request
// answered sooner costs no system call), and a connection found closed is
// remembered, so that the requests read from it afterwards are cancelled
// as they start. The engine then skips an evaluation that has not started
// (engine.NotEvaluatedError). On systems other than Linux peerClosed
// reports nothing, and net/http's own watch is all there is.

// errClientGone is the cause of a request's context cancelled because its
// client closed its connection.
var errClientGone = errors.New("the client closed its connection")

// goneCheckInterval is how often a request being served looks at its
// connection.
const goneCheckInterval = 100 * time.Millisecond

type connKey struct{}

// watchedConn is a connection as its requests see it.
type watchedConn struct {
	tcp  *net.TCPConn
	gone atomic.Bool // its peer was found to have closed its side
}

// withConn is the http.Server's ConnContext: it keeps each TCP connection
// in the contexts of its requests, for watchClient.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		return context.WithValue(ctx, connKey{}, &watchedConn{tcp: tcp})
	}
	return ctx
}

// watchClient returns the context to serve r with: r's, cancelled with
// errClientGone once r's client has closed its connection. stop ends the
// watch; call it when r has been answered.
func watchClient(r *http.Request) (ctx context.Context, stop func()) {
	c, _ := r.Context().Value(connKey{}).(*watchedConn)
	if c == nil {
		return r.Context(), func() {}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	if c.gone.Load() {
		cancel(errClientGone)
		return ctx, func() {}
	}
	w := &clientWatch{conn: c, cancel: cancel}
	// Made stopped, then armed: the timer's function reads w.timer.
	w.timer = time.AfterFunc(time.Hour, w.check)
	w.timer.Stop()
	w.timer.Reset(goneCheckInterval)
	return ctx, w.stop
}

// clientWatch looks at one request's connection every goneCheckInterval.
// Its fields are set before the timer is armed and read-only after, but
// stopped, which stop sets from the request's goroutine.
type clientWatch struct {
	conn    *watchedConn
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	stopped atomic.Bool
}

func (w *clientWatch) check() {
	switch {
	case w.stopped.Load():
	case peerClosed(w.conn.tcp):
		w.conn.gone.Store(true)
		w.cancel(errClientGone)
	default:
		w.timer.Reset(goneCheckInterval)
	}
}

// stop ends the watch: a check running meanwhile arms the timer at most
// once more, and that run does nothing.
func (w *clientWatch) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
	w.cancel(nil)
}
