package policyfetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// causeError is a failure told in one line. It keeps what caused it, so
// errors.Is and errors.As still see the original error.
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

func causef(err error, format string, args ...any) error {
	return &causeError{msg: fmt.Sprintf(format, args...), err: err}
}

const needCredentials = "credentials are needed (set --docker-config-json-path)"

// describe turns a failure to talk to host (host[:port]) into one line for
// people. credentialed tells whether Docker credentials exist for host.
func describe(err error, host string, credentialed bool) error {
	var (
		ce    *causeError
		ph    *plainHTTPError
		er    *errcode.ErrorResponse
		ua    x509.UnknownAuthorityError
		hn    x509.HostnameError
		ci    x509.CertificateInvalidError
		rh    tls.RecordHeaderError
		op    *net.OpError
		dns   *net.DNSError
		errno syscall.Errno
	)
	// The order matters: a name that does not resolve and a connection
	// that times out are also context.DeadlineExceeded (the net package's
	// timeouts say so), and their cause must not be reduced to that.
	var (
		idle    *idleError
		timeout *fetchTimeoutError
	)
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &idle):
		return idle
	case errors.As(err, &timeout):
		return timeout
	case errors.As(err, &ph):
		return causef(err, "%s", ph.Error())
	case errors.Is(err, context.Canceled):
		return causef(err, "gave up: %v", context.Canceled)
	case errors.As(err, &dns):
		return causef(err, "cannot resolve %s: %s", dns.Name, dns.Err)
	case errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect"):
		addr := host
		if op.Addr != nil {
			addr = op.Addr.String()
		}
		if op.Op == "proxyconnect" {
			addr = "proxy " + addr
		}
		reason := op.Err.Error()
		if errors.As(op.Err, &errno) {
			reason = errno.Error()
		}
		return causef(err, "cannot connect to %s: %s", addr, reason)
	case errors.Is(err, context.DeadlineExceeded):
		return causef(err, "gave up: %v", context.DeadlineExceeded)
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return causef(err, "the registry answered 401 Unauthorized: %s", needCredentials)
	case errors.As(err, &er):
		status := fmt.Sprintf("%d %s", er.StatusCode, http.StatusText(er.StatusCode))
		switch {
		case er.StatusCode == http.StatusUnauthorized && !credentialed:
			return causef(err, "the registry answered %s: %s", status, needCredentials)
		case er.StatusCode == http.StatusUnauthorized:
			return causef(err, "the registry answered %s: the credentials for %s were refused", status, host)
		case len(er.Errors) > 0:
			return causef(err, "the registry answered %s: %s", status, oneLine(er.Errors[0].Message))
		}
		return causef(err, "the registry answered %s", status)
	case errors.As(err, &ua):
		return causef(err, "the TLS certificate of %s is signed by an unknown authority: add its CA to source_authorities in sources.yml", host)
	case errors.As(err, &hn):
		return causef(err, "the TLS certificate of %s is not valid: %s", host, oneLine(hn.Error()))
	case errors.As(err, &ci):
		return causef(err, "the TLS certificate of %s is not valid: %s", host, oneLine(ci.Error()))
	case errors.Is(err, http.ErrSchemeMismatch), errors.As(err, &rh):
		return causef(err, "%s does not speak TLS: add it to insecure_sources in sources.yml to use plain http", host)
	}
	return causef(err, "%s", oneLine(err.Error()))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
