package policyserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/certwatch"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/observability"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/sharedcache"
	"github.com/wardenhq/warden/internal/verify"
	"github.com/wardenhq/warden/internal/wasm"
)

// CompatVersion is the Kubewarden release whose policy-server behaviour
// Warden matches; policies' minimumKubewardenVersion is checked against it.
const CompatVersion = buildinfo.KubewardenVersion

// serviceName is the OTLP service.name of the metrics and spans, unless
// OTEL_SERVICE_NAME says otherwise.
const serviceName = "warden-policy-server"

// Server is a running policy server.
type Server struct {
	opts    Options
	logger  *slog.Logger
	metrics *observability.Metrics
	tracing *observability.Tracing // nil: tracing off
	rt      *wasm.Runtime
	env     *engine.Environment
	// engineOpts are env's options; the leader of cluster mode builds
	// throwaway environments with them.
	engineOpts engine.Options
	revs       *revisions         // cluster mode; nil otherwise
	shared     *sharedcache.Store // the replicas' shared cache; nil when none
	fetcher    *policyfetch.Fetcher
	tls        *certwatch.Watcher
	// fetchTimeout bounds one module fetch in cluster mode, so that a
	// registry that never answers cannot hold a replica's start (and its
	// readiness) or the leader's initialisations for ever; 0 in standalone
	// mode, where only ctx bounds a fetch, as in Kubewarden.
	fetchTimeout time.Duration
	// tlsMinVersion and tlsCipherSuites are --tls-min-version and
	// --tls-cipher-suites, for the configurations of s.tls.
	tlsMinVersion   uint16
	tlsCipherSuites []uint16
	// bodies bounds the request bodies held in memory at once.
	bodies *bodyBudget

	// prefetch fetches the modules of changed policies for Reload, in the
	// background (standalone mode; nil in cluster mode).
	prefetch *prefetcher
	reloadMu sync.Mutex             // serialises reloads
	fileErr  atomic.Pointer[string] // why the policies file last failed to be read

	main, readiness, metricsLn net.Listener
	ready                      atomic.Bool
	settled                    atomic.Bool // see reflectorsSettled
	// reflectorsStarted is closed once the start has asked for the
	// reflectors of the policies' kinds (standalone mode; nil in cluster
	// mode, whose revisions ask for them).
	reflectorsStarted chan struct{}
}

// SetGOMAXPROCS gives the process 2*workers+1 Ps (never fewer than it has):
// the wasm runtime runs guest code on all but one of them, so each policy's
// workers leave room for the others and a P stays free for the HTTP server
// and the timers that interrupt guests (the Go scheduler cannot preempt guest
// code). Call it before New.
func SetGOMAXPROCS(workers int) {
	if want := 2*workers + 1; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// New loads the policies and binds the listeners; Serve starts answering.
// The server's readiness endpoint reports ready only once Serve runs and
// the reflectors of the kinds its policies read hold their first lists.
//
// In standalone mode a policy of the policies file that fails to load
// fails New, as in Kubewarden, unless Options.ContinueOnErrors. In cluster
// mode none does: a PolicyRevision that fails to load is reported on the
// revision (Ready False, LoadError, with the replica's ordinal) and left
// out, and the others are served; the failed one is tried again later.
func New(ctx context.Context, opts Options, logger *slog.Logger) (*Server, error) {
	tlsMinVersion, err := certwatch.ParseMinVersion(opts.TLSMinVersion)
	if err != nil {
		return nil, fmt.Errorf("--tls-min-version: %w", err)
	}
	tlsCipherSuites, err := certwatch.ParseCipherSuites(opts.TLSCipherSuites)
	if err != nil {
		return nil, fmt.Errorf("--tls-cipher-suites: %w", err)
	}
	s := &Server{opts: opts, logger: logger, tlsMinVersion: tlsMinVersion, tlsCipherSuites: tlsCipherSuites,
		// Never smaller than one body of the largest size accepted.
		bodies: newBodyBudget(max(opts.inFlightBodyBytes(), opts.MaxRequestBodySize))}
	ok := false
	defer func() {
		if !ok {
			s.Close(context.Background())
		}
	}()
	s.metrics, err = observability.NewMetrics(ctx, observability.MetricsOptions{
		OTLP:        opts.EnableMetrics,
		ServiceName: serviceName,
		Reflectors:  reflectorStates(opts.ReflectorStates),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up metrics: %w", err)
	}
	if s.tracing, err = newTracing(ctx, opts, logger); err != nil {
		return nil, err
	}
	var configs map[string]*engine.PolicyConfig // standalone mode's
	if opts.PolicyServerName != "" {
		if s.revs, err = newRevisions(ctx, s); err != nil {
			return nil, err
		}
		s.fetchTimeout = clusterFetchTimeout
	} else {
		if configs, err = readPolicies(opts.PoliciesPath); err != nil {
			return nil, err
		}
		// They list while the modules compile, and resolve their kinds
		// there too: an API server that drops packets makes each kind
		// wait for discovery's timeout, 32 s.
		s.reflectorsStarted = make(chan struct{})
		go func() {
			defer close(s.reflectorsStarted)
			s.startReflectors(ctx, configs)
		}()
	}
	var shared *sharedcache.Store
	if opts.SharedCacheDir != "" {
		shared, err = sharedcache.Open(sharedcache.Options{
			Dir: opts.SharedCacheDir, Version: buildinfo.String(),
			CertFile: opts.CacheSigningCert, KeyFile: opts.CacheSigningKey, CAFile: opts.CacheCAFile,
		})
		if err != nil {
			return nil, err
		}
		s.shared = shared
	}
	s.rt, err = wasm.NewRuntime(ctx, wasm.Config{
		CacheDir:         opts.CacheDir,
		Shared:           shared,
		MemoryLimitBytes: uint64(opts.MemoryLimitMiB) << 20,
		MaxHostCallBytes: opts.MaxHostCallBytes,
		MaxResponseBytes: opts.MaxResponseBytes,
		Logger:           logger,
	})
	if err != nil {
		return nil, err
	}
	verifier, err := newVerifier(ctx, opts, logger)
	if err != nil {
		return nil, err
	}
	// The fetcher stays open: reloads fetch new modules.
	if s.fetcher, err = newFetcher(opts, logger, verifier); err != nil {
		return nil, err
	}
	if s.revs == nil {
		s.prefetch = newPrefetcher(func(ctx context.Context, uri string) ([]byte, error) {
			m, err := s.fetcher.Fetch(ctx, uri)
			return m.Bytes, err
		}, s.prefetched)
	}
	// Run natively, Kubewarden's cel-policy would never be fetched, so its
	// signature never checked: with verification on, it runs from its
	// verified module.
	wasmCEL := !opts.NativeCELPolicy || verifier != nil
	if opts.NativeCELPolicy && verifier != nil {
		logger.InfoContext(ctx, "signature verification is on: Kubewarden's cel-policy runs from its verified wasm module, not natively")
	}
	start := time.Now()
	s.engineOpts = engine.Options{
		Fetch:                 s.fetch,
		Runtime:               s.rt,
		Logger:                logger,
		Recorder:              evaluationRecorder{metrics: s.metrics, tracing: s.tracing},
		DefaultTimeout:        opts.PolicyTimeout,
		TimeoutProtection:     !opts.DisableTimeout,
		ContinueOnErrors:      opts.ContinueOnErrors,
		AlwaysAcceptNamespace: opts.AlwaysAcceptNS,
		Workers:               opts.Workers,
		CompatVersion:         CompatVersion,
		WasmCELPolicy:         wasmCEL,
		HostCapabilities:      opts.HostCapabilities,
	}
	if s.env, err = engine.NewEnvironment(s.engineOpts); err != nil {
		return nil, err
	}
	if s.revs != nil {
		// A revision that fails to load is reported on it and left out;
		// the server starts with the others (revisions.start).
		loaded, failed, err := s.revs.start(ctx)
		if err != nil {
			return nil, err
		}
		logger.InfoContext(ctx, "policies loaded", "count", loaded, "failed", failed, "duration", time.Since(start).Round(time.Millisecond))
	} else {
		// As Kubewarden's, a policy that fails to load fails the start,
		// unless --continue-on-errors.
		if err := s.env.Init(ctx, configs); err != nil {
			return nil, err
		}
		logger.InfoContext(ctx, "policies loaded", "count", len(configs), "duration", time.Since(start).Round(time.Millisecond))
	}
	// Loading leaves behind garbage several times the size of the modules
	// (decoded, rewritten and compiled copies): hand it back to the OS now
	// rather than when the scavenger gets to it.
	debug.FreeOSMemory()

	if opts.CertFile != "" {
		s.tls, err = certwatch.New(opts.CertFile, opts.KeyFile, opts.ClientCAFiles, logger)
		if err != nil {
			return nil, err
		}
	}
	if s.main, err = listen(opts.Addr, opts.Port); err != nil {
		return nil, err
	}
	if s.readiness, err = listen(opts.Addr, opts.ReadinessProbePort); err != nil {
		return nil, err
	}
	if opts.MetricsPort > 0 {
		if s.metricsLn, err = listen(opts.Addr, opts.MetricsPort); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// clusterFetchTimeout is how long a module fetch may take in cluster mode;
// one that takes longer fails (PullError, or LoadError on a replica) and is
// tried again later.
const clusterFetchTimeout = 2 * time.Minute

// fetch returns the module at uri: what a reload fetched beforehand (see
// prefetcher), or through the server's fetcher, within s.fetchTimeout when
// it is set. It is the engine's Options.Fetch.
func (s *Server) fetch(ctx context.Context, uri string) ([]byte, error) {
	if s.prefetch != nil {
		if data, err, ok := s.prefetch.take(uri); ok {
			return data, err
		}
	}
	if s.fetchTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.fetchTimeout,
			fmt.Errorf("gave up after %s: %w", s.fetchTimeout, context.DeadlineExceeded))
		defer cancel()
	}
	m, err := s.fetcher.Fetch(ctx, uri)
	return m.Bytes, err
}

func listen(addr string, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	return ln, nil
}

// Addr is the address of the main (webhook) listener.
func (s *Server) Addr() net.Addr { return s.main.Addr() }

// ReadinessAddr is the address of the readiness (and metrics) listener.
func (s *Server) ReadinessAddr() net.Addr { return s.readiness.Addr() }

// Environment returns the policies the server serves.
func (s *Server) Environment() *engine.Environment { return s.env }

// Serve answers requests until ctx is done, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	mainSrv := s.httpServer(s.Handler())
	// Evaluations run under evalCtx, which shutdown cancels once in-flight
	// requests have had shutdownGrace to finish: a guest still running
	// then (a loop) is interrupted and its request answered, instead of
	// holding the shutdown until its time limit.
	evalCtx, cancelEvals := context.WithCancelCause(context.WithoutCancel(ctx))
	interrupt := func() { cancelEvals(errShuttingDown) }
	defer interrupt()
	mainSrv.BaseContext = func(net.Listener) context.Context { return evalCtx }
	ops := http.NewServeMux()
	ops.HandleFunc("GET /readiness", s.handleReadiness)
	ops.HandleFunc("GET /policies", s.handlePolicies)
	ops.Handle("GET /metrics", s.metrics.Handler())
	opsSrv := s.httpServer(refuseBodies(ops))

	errs := make(chan error, 4)
	serve := func(srv *http.Server, ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- err
		}
	}
	mainLn := s.main
	if s.tls != nil {
		cfg := s.tls.TLSConfig()
		cfg.MinVersion, cfg.CipherSuites = s.tlsMinVersion, s.tlsCipherSuites
		mainLn = tls.NewListener(s.main, cfg)
		go func() {
			if err := s.tls.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("watching certificates: %w", err)
			}
		}()
	}
	revsDone := make(chan struct{})
	if s.revs != nil {
		go func() {
			defer close(revsDone)
			s.revs.run(ctx)
		}()
	} else {
		close(revsDone)
	}
	go func() {
		if !s.opts.WatchPolicies || s.revs != nil {
			return
		}
		if err := s.watchPolicies(ctx); err != nil {
			// Reloads on SIGHUP still work: serving goes on.
			s.logger.ErrorContext(ctx, "cannot watch the policies file: it is read again on SIGHUP only",
				observability.KeyPath, s.opts.PoliciesPath, observability.KeyError, err)
		}
	}()
	go serve(mainSrv, mainLn)
	go serve(opsSrv, s.readiness)
	var metricsSrv *http.Server
	if s.metricsLn != nil {
		metricsSrv = s.httpServer(refuseBodies(s.metrics.Handler()))
		go serve(metricsSrv, s.metricsLn)
	}
	s.ready.Store(true)
	s.logger.InfoContext(ctx, "policy server listening",
		observability.KeyAddr, s.main.Addr().String(), "tls", s.tls != nil, "readiness_addr", s.readiness.Addr().String())

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	s.ready.Store(false)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grace := time.AfterFunc(shutdownGrace, interrupt)
	defer grace.Stop()
	for _, srv := range []*http.Server{mainSrv, opsSrv, metricsSrv} {
		if srv != nil {
			_ = srv.Shutdown(shutdownCtx)
		}
	}
	// The revisions' loop releases the leader Lease as it stops.
	select {
	case <-revsDone:
	case <-shutdownCtx.Done():
	}
	s.Close(shutdownCtx)
	return err
}

// errShuttingDown is why the evaluations still running at the end of
// shutdownGrace are interrupted; their requests are answered with it.
var errShuttingDown = fmt.Errorf("the policy server is shutting down: %w", context.Canceled)

// shutdownGrace is how long in-flight evaluations have to finish after
// the server stops accepting requests, before their guests are
// interrupted.
const shutdownGrace = time.Second

// Close releases the engine and the runtime, and flushes and stops the
// metrics and span exporters.
func (s *Server) Close(ctx context.Context) {
	if s.revs != nil {
		s.revs.close()
	}
	if s.env != nil {
		s.env.Close(ctx)
	}
	if s.fetcher != nil {
		s.fetcher.Close()
	}
	if s.rt != nil {
		_ = s.rt.Close(ctx)
	}
	_ = s.metrics.Shutdown(ctx)
	_ = s.tracing.Shutdown(ctx)
	for _, ln := range []net.Listener{s.main, s.readiness, s.metricsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// httpServer returns the server of one listener. Every request must arrive
// within --request-read-timeout, its headers within 10 s: the server then
// lifts the read deadline once the handler has read the body to its end (or
// at once without a body), so evaluations run unbounded by it and
// keep-alive connections live on (IdleTimeout bounds them between requests).
// A body left unread or not finished in time fails to read, and the
// connection is closed. (net/http lifts the deadline as it starts watching
// the connection for the client going away; TestSlowRequestBodies checks
// that an evaluation outliving the deadline is not cancelled.)
func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.opts.RequestReadTimeout,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
		ConnContext:       withConn, // for watchClient (gone.go)
	}
}

// refuseBodies answers 413 to a request with a body, reading none of it, and
// closes its connection: the readiness and metrics routes take none, and
// a body must not hold their connections or memory.
func refuseBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		// A deadline already passed: the server reads nothing of the
		// body after the answer, to reuse the connection.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "This port's routes take no request body")
	})
}

// handleReadiness answers 200 once the server serves and its reflectors
// are settled; until then 503, saying why.
func (s *Server) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	switch {
	case !s.ready.Load():
		http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
	case !s.reflectorsSettled():
		why := "waiting for the Kubernetes kinds the policies read to be listed"
		if s.opts.ReflectorsWaiting != nil {
			if reason := s.opts.ReflectorsWaiting(); reason != "" {
				why = reason
			}
		}
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// reflectorsSettled reports whether the reflectors of the policies' kinds
// held their first lists when the server started (Options.ReflectorsSettled).
// Once they have, it stays true: a reload that adds a kind must not take a
// serving replica out of its Service while that kind is listed.
func (s *Server) reflectorsSettled() bool {
	if s.opts.ReflectorsSettled == nil || s.settled.Load() {
		return true
	}
	if s.reflectorsStarted != nil {
		select {
		case <-s.reflectorsStarted:
		default:
			return false
		}
	}
	if s.opts.ReflectorsSettled() {
		s.settled.Store(true)
		return true
	}
	return false
}

// Handler returns the webhook routes (docs/compatibility.md#http-routes).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate/{id...}", s.handleReview(engine.OriginValidate))
	mux.HandleFunc("POST /audit/{id...}", s.handleReview(engine.OriginAudit))
	mux.HandleFunc("POST /validate_raw/{id...}", s.handleRaw)
	if s.opts.EnablePprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// newTracing returns the span exporter of --log-fmt otlp, or nil when
// tracing is off. As in Kubewarden, whose log filter also filters its
// info-level spans, --log-level warn or error exports none.
func newTracing(ctx context.Context, opts Options, logger *slog.Logger) (*observability.Tracing, error) {
	if !strings.EqualFold(opts.LogFormat, "otlp") {
		return nil, nil
	}
	if level, err := observability.ParseLevel(opts.LogLevel); err == nil && level > slog.LevelInfo {
		logger.WarnContext(ctx, "no trace spans exported: --log-fmt otlp exports them at --log-level info, debug or trace")
		return nil, nil
	}
	tracing, err := observability.NewTracing(ctx, observability.TracingOptions{ServiceName: serviceName})
	if err != nil {
		return nil, fmt.Errorf("setting up tracing: %w", err)
	}
	logger.InfoContext(ctx, "exporting trace spans over OTLP")
	return tracing, nil
}

// evaluationRecorder hands every evaluation to the metrics and to the
// tracing, which records it as a child of the request's span.
type evaluationRecorder struct {
	metrics *observability.Metrics
	tracing *observability.Tracing
}

func (r evaluationRecorder) RecordEvaluation(ctx context.Context, e observability.Evaluation, latency time.Duration) {
	r.metrics.RecordEvaluation(ctx, e, latency)
	r.tracing.RecordEvaluation(ctx, e, latency)
}

func (r evaluationRecorder) RecordInitializationError(ctx context.Context, policyName, err string) {
	r.metrics.RecordInitializationError(ctx, policyName, err)
	r.tracing.RecordInitializationError(ctx, policyName, err)
}

func (r evaluationRecorder) RecordTimeout(ctx context.Context, policyName string) {
	r.metrics.RecordTimeout(ctx, policyName)
}

// newVerifier returns the signature verifier of --verification-path, or nil
// when it is not set. Keyless signatures and Rekor bundles are checked
// against the Sigstore trust root of --sigstore-trust-config, offline;
// without it, the requirements that need one are never met, and the server
// warns about them.
func newVerifier(ctx context.Context, opts Options, logger *slog.Logger) (policyfetch.Verifier, error) {
	if opts.VerificationPath == "" {
		if opts.SigstoreTrust != "" {
			logger.WarnContext(ctx, "sigstore trust config unused: no verification config (--verification-path)",
				observability.KeyPath, opts.SigstoreTrust)
		}
		return nil, nil
	}
	cfg, err := verify.LoadConfig(opts.VerificationPath)
	if err != nil {
		return nil, err
	}
	var vopts []verify.Option
	if opts.SigstoreTrust != "" {
		tr, err := verify.LoadTrustConfig(opts.SigstoreTrust)
		if err != nil {
			return nil, err
		}
		vopts = append(vopts, verify.WithTrustRoot(tr))
	}
	v, err := verify.New(cfg, vopts...)
	if err != nil {
		return nil, fmt.Errorf("verification config %s: %w", opts.VerificationPath, err)
	}
	if keyless := cfg.Keyless(); len(keyless) > 0 && opts.SigstoreTrust == "" {
		logger.WarnContext(ctx, "signature requirements that need a sigstore trust root (--sigstore-trust-config): modules fail them",
			observability.KeyPath, opts.VerificationPath, "requirements", keyless)
	}
	logger.InfoContext(ctx, "policy modules must be signed", observability.KeyPath, opts.VerificationPath)
	return v, nil
}

// newFetcher returns the fetcher of the policies' modules, configured by
// --policies-download-dir, --sources-path and --docker-config-json-path,
// verifying signatures with verifier when it is not nil.
func newFetcher(opts Options, logger *slog.Logger, verifier policyfetch.Verifier) (*policyfetch.Fetcher, error) {
	var sources *policyfetch.Sources
	if opts.SourcesPath != "" {
		var err error
		if sources, err = policyfetch.LoadSources(opts.SourcesPath); err != nil {
			return nil, err
		}
		// As in Kubewarden, the proxies come from the environment only.
		sources.Proxies = nil
	}
	return policyfetch.New(policyfetch.Options{
		StoreDir:         opts.DownloadDir,
		Sources:          sources,
		DockerConfigPath: opts.DockerConfigPath,
		Logger:           logger,
		Verifier:         verifier,
		ConnectTimeout:   opts.FetchConnectTimeout,
		IdleTimeout:      opts.FetchIdleTimeout,
		Timeout:          opts.FetchTimeout,
	})
}
