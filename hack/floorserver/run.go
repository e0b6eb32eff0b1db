package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/wardenhq/warden/hack/internal/cmdline"
)

// run is the whole program: it parses args (args[0] is the program name) and
// serves until ctx is canceled. Once listening it prints
// "listening on https://ADDR" to stdout; logs go to stderr. It returns 0 after
// a clean shutdown, 1 on failure and 2 for invalid flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var opts Options
	const usage = "usage: floorserver [-addr ADDR] [-write-ca FILE | -cert-file FILE -key-file FILE]\n\nServes a webhook that allows every AdmissionReview at POST /validate/{name}."
	if code, ok := cmdline.Parse("floorserver", usage, args, &opts, stderr); !ok {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, &opts, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "floorserver: %v\n", err)
		return 1
	}
	return 0
}

// serve listens on opts.Addr and serves the webhook over TLS until ctx is
// canceled, then shuts down gracefully.
func serve(ctx context.Context, opts *Options, stdout io.Writer, logger *slog.Logger) error {
	cert, err := certificate(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	srv := &http.Server{
		Handler:           newHandler(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }() // closes ln
	fmt.Fprintf(stdout, "listening on https://%s\n", ln.Addr())

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// certificate loads -cert-file and -key-file, or generates a self-signed
// certificate and writes it to -write-ca if set.
func certificate(opts *Options) (tls.Certificate, error) {
	if opts.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("loading the certificate: %w", err)
		}
		return cert, nil
	}
	cert, certPEM, err := selfSignedCert(time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	if opts.WriteCA != "" {
		if err := os.WriteFile(opts.WriteCA, certPEM, 0o644); err != nil {
			return tls.Certificate{}, fmt.Errorf("writing -write-ca: %w", err)
		}
	}
	return cert, nil
}
