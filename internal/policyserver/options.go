package policyserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/wardenhq/warden/internal/certwatch"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/policyfetch"
	"github.com/wardenhq/warden/internal/reflector"
	"github.com/wardenhq/warden/internal/wasm"
)

// Options configure the policy server. Each flag has the environment variable
// Kubewarden's policy-server reads (docs/compatibility.md#policy-server-flags);
// a flag given on the command line wins over its variable.
type Options struct {
	Addr               string
	Port               int
	ReadinessProbePort int
	Workers            int
	CertFile           string
	KeyFile            string
	ClientCAFiles      []string
	PoliciesPath       string
	DownloadDir        string
	SourcesPath        string
	VerificationPath   string
	DockerConfigPath   string
	SigstoreCacheDir   string
	SigstoreTrust      string
	EnableMetrics      bool
	MetricsPort        int
	LogLevel           string
	LogFormat          string
	LogNoColor         bool
	AlwaysAcceptNS     string
	PolicyTimeout      time.Duration
	DisableTimeout     bool
	IgnoreKubeFailure  bool
	EnablePprof        bool
	ContinueOnErrors   bool
	CacheDir           string
	MemoryLimitMiB     int
	MaxRequestBodySize int64
	// MaxHostCallBytes caps the payload of one host call of a policy
	// (wasm.Config.MaxHostCallBytes); MaxResponseBytes caps a policy's
	// answer (wasm.Config.MaxResponseBytes).
	MaxHostCallBytes int
	MaxResponseBytes int
	// FetchConnectTimeout, FetchIdleTimeout and FetchTimeout bound the
	// fetches of remote modules (policyfetch.Options).
	FetchConnectTimeout time.Duration
	FetchIdleTimeout    time.Duration
	FetchTimeout        time.Duration
	NativeCELPolicy     bool
	WatchPolicies       bool

	// MaxInFlightBodyBytes bounds the bytes of request bodies held at once,
	// across all connections; 0 is 4 × MaxRequestBodySize.
	MaxInFlightBodyBytes int64
	// RequestReadTimeout bounds the time to receive a request, headers and
	// body, on every listener (http.Server.ReadTimeout); 0: no bound.
	RequestReadTimeout time.Duration
	// TLSMinVersion and TLSCipherSuites are --tls-min-version and
	// --tls-cipher-suites (certwatch.ParseMinVersion, ParseCipherSuites);
	// no suites: certwatch.DefaultCipherSuites.
	TLSMinVersion   string
	TLSCipherSuites []string

	// Cluster mode (RFC 000): with PolicyServerName set, the server serves
	// the PolicyRevisions of that PolicyServer instead of --policies.
	PolicyServerName       string
	PodName                string
	PodNamespace           string
	NamespacedCapabilities []string
	// SharedCacheDir is the volume of compiled modules the replicas share,
	// signed with CacheSigningCert/Key and verified against CacheCAFile
	// (internal/sharedcache).
	SharedCacheDir   string
	CacheSigningCert string
	CacheSigningKey  string
	CacheCAFile      string
	// Kube reaches the API server in cluster mode. It is not a flag: Main
	// loads it as the kubernetes host capabilities do.
	Kube *rest.Config

	// HostCapabilities answers the policies' oci, net, crypto and
	// kubernetes host calls. It is not a flag: Main builds it from the
	// options and the environment (newHostCapabilities). Nil: those calls
	// fail.
	HostCapabilities engine.HostCapabilities
	// Reflect, when set, is called at load for each Kubernetes kind the
	// policies may read, to start keeping a copy of its objects (RFC 004);
	// an error is logged, and the kind's first list tries again.
	Reflect func(apiVersion, kind string) error
	// RetainReflectors, when set, is called after a reload with the kinds
	// the policies served may read, to stop keeping a copy of the others.
	RetainReflectors func(ctx context.Context, kinds []schema.GroupVersionKind)
	// ReflectorsSettled, when set, tells whether the copies Reflect started
	// hold their first full list (or cannot be listed at all): the server
	// is not ready before it first does, as a request reading a kind not
	// listed yet would wait for it.
	ReflectorsSettled func() bool
	// ReflectorsWaiting, when set, says why the copies are not settled:
	// the readiness endpoint's answer while it waits for them.
	ReflectorsWaiting func() string
	// ReflectorStates, when set, returns the state of the copies, which
	// /metrics shows (warden_reflector_*).
	ReflectorStates func() []reflector.State
	// ReflectorDBPath is the SQLite database of the copies (RFC 004); empty
	// means a file in a temporary directory, removed at exit.
	ReflectorDBPath string
}

// inFlightBodyBytes is the budget of request bodies held at once
// (--max-in-flight-request-body-bytes, 0: 4 × --max-request-body-bytes).
func (o *Options) inFlightBodyBytes() int64 {
	if o.MaxInFlightBodyBytes > 0 {
		return o.MaxInFlightBodyBytes
	}
	if o.MaxRequestBodySize > math.MaxInt64/4 {
		return math.MaxInt64
	}
	return 4 * o.MaxRequestBodySize
}

// DefaultOptions returns the defaults of every option.
func DefaultOptions() Options {
	cache := ""
	if dir, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(dir, "warden", "wasm")
	}
	return Options{
		Addr:                "0.0.0.0",
		Port:                3000,
		ReadinessProbePort:  8081,
		Workers:             runtime.NumCPU(),
		PoliciesPath:        "policies.yml",
		DownloadDir:         ".",
		SigstoreCacheDir:    "sigstore-data",
		LogLevel:            "info",
		LogFormat:           "text",
		PolicyTimeout:       2 * time.Second,
		CacheDir:            cache,
		MemoryLimitMiB:      512,
		MaxRequestBodySize:  16 << 20,
		MaxHostCallBytes:    wasm.DefaultMaxHostCallBytes,
		MaxResponseBytes:    wasm.DefaultMaxResponseBytes,
		FetchConnectTimeout: policyfetch.DefaultConnectTimeout,
		FetchIdleTimeout:    policyfetch.DefaultIdleTimeout,
		FetchTimeout:        policyfetch.DefaultTimeout,
		RequestReadTimeout:  10 * time.Second,
		TLSMinVersion:       "1.2",
		NativeCELPolicy:     true,
		WatchPolicies:       true,
	}
}

// flagEnv maps flags to their environment variables.
var flagEnv = map[string]string{
	"addr":                    "KUBEWARDEN_BIND_ADDRESS",
	"port":                    "KUBEWARDEN_PORT",
	"readiness-probe-port":    "KUBEWARDEN_READINESS_PROBE_PORT",
	"workers":                 "KUBEWARDEN_WORKERS",
	"cert-file":               "KUBEWARDEN_CERT_FILE",
	"key-file":                "KUBEWARDEN_KEY_FILE",
	"client-ca-file":          "KUBEWARDEN_CLIENT_CA_FILE",
	"policies":                "KUBEWARDEN_POLICIES",
	"policies-download-dir":   "KUBEWARDEN_POLICIES_DOWNLOAD_DIR",
	"sources-path":            "KUBEWARDEN_SOURCES_PATH",
	"verification-path":       "KUBEWARDEN_VERIFICATION_CONFIG_PATH",
	"docker-config-json-path": "KUBEWARDEN_DOCKER_CONFIG_JSON_PATH",
	"sigstore-cache-dir":      "KUBEWARDEN_SIGSTORE_CACHE_DIR",
	"sigstore-trust-config":   "KUBEWARDEN_SIGSTORE_TRUST_CONFIG_PATH",
	"enable-metrics":          "KUBEWARDEN_ENABLE_METRICS",
	"metrics-port":            "WARDEN_METRICS_PORT",
	"log-level":               "KUBEWARDEN_LOG_LEVEL",
	"log-fmt":                 "KUBEWARDEN_LOG_FMT",
	"log-no-color":            "NO_COLOR",
	"always-accept-admission-reviews-on-namespace": "KUBEWARDEN_ALWAYS_ACCEPT_ADMISSION_REVIEWS_ON_NAMESPACE",
	"policy-timeout":                       "KUBEWARDEN_POLICY_TIMEOUT",
	"disable-timeout-protection":           "KUBEWARDEN_DISABLE_TIMEOUT_PROTECTION",
	"ignore-kubernetes-connection-failure": "KUBEWARDEN_IGNORE_KUBERNETES_CONNECTION_FAILURE",
	"enable-pprof":                         "KUBEWARDEN_ENABLE_PPROF",
	"continue-on-errors":                   "KUBEWARDEN_CONTINUE_ON_ERRORS",
	"cache-dir":                            "WARDEN_CACHE_DIR",
	"memory-limit":                         "WARDEN_MEMORY_LIMIT",
	"max-request-body-bytes":               "WARDEN_MAX_REQUEST_BODY_BYTES",
	"max-in-flight-request-body-bytes":     "WARDEN_MAX_IN_FLIGHT_REQUEST_BODY_BYTES",
	"max-host-call-payload-bytes":          "WARDEN_MAX_HOST_CALL_PAYLOAD_BYTES",
	"max-policy-response-bytes":            "WARDEN_MAX_POLICY_RESPONSE_BYTES",
	"fetch-connect-timeout":                "WARDEN_FETCH_CONNECT_TIMEOUT",
	"fetch-idle-timeout":                   "WARDEN_FETCH_IDLE_TIMEOUT",
	"fetch-timeout":                        "WARDEN_FETCH_TIMEOUT",
	"request-read-timeout":                 "WARDEN_REQUEST_READ_TIMEOUT",
	"tls-min-version":                      "WARDEN_TLS_MIN_VERSION",
	"tls-cipher-suites":                    "WARDEN_TLS_CIPHER_SUITES",
	"native-cel-policy":                    "WARDEN_NATIVE_CEL_POLICY",
	"policy-server-name":                   "KUBEWARDEN_POLICY_SERVER_NAME",
	"pod-name":                             "KUBEWARDEN_POD_NAME",
	"pod-namespace":                        "KUBEWARDEN_POD_NAMESPACE",
	"namespaced-policies-capabilities":     "KUBEWARDEN_NAMESPACED_POLICIES_CAPABILITIES",
	"shared-cache-dir":                     "WARDEN_SHARED_CACHE_DIR",
	"cache-signing-cert":                   "WARDEN_CACHE_SIGNING_CERT_FILE",
	"cache-signing-key":                    "WARDEN_CACHE_SIGNING_KEY_FILE",
	"cache-ca-file":                        "WARDEN_CACHE_CA_FILE",
	"reflector-db-path":                    "WARDEN_REFLECTOR_DB_PATH",
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", o.Addr, "Bind against ADDRESS")
	fs.IntVar(&o.Port, "port", o.Port, "Listen on PORT")
	fs.IntVar(&o.ReadinessProbePort, "readiness-probe-port", o.ReadinessProbePort, "Expose readiness endpoint (and /metrics) on READINESS_PROBE_PORT, plain HTTP")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Number of guest calls of one policy that run at once (the server runs up to twice as many overall)")
	fs.StringVar(&o.CertFile, "cert-file", o.CertFile, "Path to an X.509 certificate file for HTTPS")
	fs.StringVar(&o.KeyFile, "key-file", o.KeyFile, "Path to an X.509 private key file for HTTPS")
	fs.StringSliceVar(&o.ClientCAFiles, "client-ca-file", o.ClientCAFiles, "Path to CA certificates (comma separated) that client certificates must chain to: enables mutual TLS")
	fs.StringVar(&o.PoliciesPath, "policies", o.PoliciesPath, "YAML file holding the policies to be loaded and their settings")
	fs.StringVar(&o.DownloadDir, "policies-download-dir", o.DownloadDir, "Download path for the policies")
	fs.StringVar(&o.SourcesPath, "sources-path", o.SourcesPath, "YAML file holding source information (https, registry insecure hosts, custom CA's...)")
	fs.StringVar(&o.VerificationPath, "verification-path", o.VerificationPath, "YAML file holding verification information (URIs, keys, annotations...): every module must then be a signed registry:// module")
	fs.StringVar(&o.DockerConfigPath, "docker-config-json-path", o.DockerConfigPath, "Path to a Docker config.json-like path. Can be used to indicate registry authentication details")
	fs.StringVar(&o.SigstoreCacheDir, "sigstore-cache-dir", o.SigstoreCacheDir, "Directory used to cache sigstore data (accepted and unused: Warden verifies signatures offline)")
	fs.StringVar(&o.SigstoreTrust, "sigstore-trust-config", o.SigstoreTrust, "JSON-formatted file conforming to the ClientTrustConfig message in the Sigstore protobuf specs: the Fulcio and Rekor keyless signatures are checked against, offline (Warden never fetches Sigstore's public trust root)")
	fs.BoolVar(&o.EnableMetrics, "enable-metrics", o.EnableMetrics, "Export metrics over OTLP too (OTEL_EXPORTER_OTLP_* variables); /metrics is always served")
	fs.IntVar(&o.MetricsPort, "metrics-port", o.MetricsPort, "Also serve /metrics on this plain HTTP port (0: only on the readiness port)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "Log level: trace, debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-fmt", o.LogFormat, "Log output format: text, json, otlp (text, and trace spans exported over OTLP: OTEL_EXPORTER_OTLP_* variables)")
	fs.BoolVar(&o.LogNoColor, "log-no-color", o.LogNoColor, "Disable colored output for logs")
	fs.StringVar(&o.AlwaysAcceptNS, "always-accept-admission-reviews-on-namespace", o.AlwaysAcceptNS, "Always accept AdmissionReviews that target the given namespace")
	fs.DurationVar(&o.PolicyTimeout, "policy-timeout", o.PolicyTimeout, "Interrupt policy evaluation after the given time (a number of seconds, or a duration such as 500ms)")
	fs.BoolVar(&o.DisableTimeout, "disable-timeout-protection", o.DisableTimeout, "Disable policy timeout protection")
	fs.BoolVar(&o.IgnoreKubeFailure, "ignore-kubernetes-connection-failure", o.IgnoreKubeFailure, "Start even when the Kubernetes configuration (KUBECONFIG, ~/.kube/config or in-cluster) cannot be read; the kubernetes host capabilities then fail, as they do when there is no configuration at all")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", o.EnablePprof, "Serve the Go profiling endpoints under /debug/pprof/ on the main listener")
	fs.BoolVar(&o.ContinueOnErrors, "continue-on-errors", o.ContinueOnErrors, "Start even when policies fail to load; those policies reject every request with their error")
	fs.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "Directory of the compiled-module cache (empty: no cache)")
	fs.IntVar(&o.MemoryLimitMiB, "memory-limit", o.MemoryLimitMiB, "Memory cap of one policy instance, in MiB")
	fs.Int64Var(&o.MaxRequestBodySize, "max-request-body-bytes", o.MaxRequestBodySize, "Largest request body accepted")
	fs.IntVar(&o.MaxHostCallBytes, "max-host-call-payload-bytes", o.MaxHostCallBytes, "Largest payload a policy may hand the host in one host call (a tracing/log line included, and the arguments of a Rego builtin the host runs); a larger call fails, naming this limit, and the policy gets that error (a Rego policy's evaluation fails with it)")
	fs.IntVar(&o.MaxResponseBytes, "max-policy-response-bytes", o.MaxResponseBytes, "Largest answer a wasm policy may give to one evaluation; a larger one is an evaluation error (allowed false, code 500) naming this limit")
	fs.DurationVar(&o.FetchConnectTimeout, "fetch-connect-timeout", o.FetchConnectTimeout, "Longest time to connect to a registry or HTTPS server for a module, TLS handshake included")
	fs.DurationVar(&o.FetchIdleTimeout, "fetch-idle-timeout", o.FetchIdleTimeout, "A module fetch fails when no byte arrives for this long (headers or body)")
	fs.DurationVar(&o.FetchTimeout, "fetch-timeout", o.FetchTimeout, "Longest time a module fetch may take, however fast its bytes come; a reload does not wait for it (the policy shows as fetching in /policies)")
	fs.Int64Var(&o.MaxInFlightBodyBytes, "max-in-flight-request-body-bytes", o.MaxInFlightBodyBytes, "Most bytes of request bodies held in memory at once, across all connections; a request that cannot get its bytes within a second is answered 429 with Retry-After (0: 4 × --max-request-body-bytes)")
	fs.DurationVar(&o.RequestReadTimeout, "request-read-timeout", o.RequestReadTimeout, "Longest time to receive a request, headers and body, on every listener (the headers alone: 10s at most); a slower webhook request is answered 408, and the connection closed")
	fs.StringVar(&o.TLSMinVersion, "tls-min-version", o.TLSMinVersion, "Oldest TLS version accepted: 1.2 or 1.3 (or VersionTLS12, VersionTLS13)")
	fs.StringSliceVar(&o.TLSCipherSuites, "tls-cipher-suites", o.TLSCipherSuites, "TLS 1.2 cipher suites offered, comma-separated IANA names (default: ECDHE with AES-GCM or ChaCha20-Poly1305 only); TLS 1.3 suites are not configurable")
	fs.BoolVar(&o.WatchPolicies, "watch-policies", o.WatchPolicies, "Reload the --policies file when it changes; false reloads it on SIGHUP only")
	fs.StringVar(&o.PolicyServerName, "policy-server-name", o.PolicyServerName, "Cluster mode: serve the PolicyRevisions of this PolicyServer (instead of --policies), report their status and take part in electing the replica that initialises them")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "Cluster mode: this replica's pod name, ending in its ordinal (the downward API's metadata.name)")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Cluster mode: the namespace of the PolicyRevisions and of the leader Lease (the downward API's metadata.namespace)")
	fs.StringSliceVar(&o.NamespacedCapabilities, "namespaced-policies-capabilities", o.NamespacedCapabilities, "Cluster mode: host capabilities namespaced policies may use (comma separated; empty: all)")
	fs.StringVar(&o.SharedCacheDir, "shared-cache-dir", o.SharedCacheDir, "Directory of compiled modules shared with other replicas (a ReadWriteMany volume): modules whose signed code is there are not compiled again, and code compiled here is stored there, signed; needs --cache-dir, --cache-signing-cert, --cache-signing-key and --cache-ca-file")
	fs.StringVar(&o.CacheSigningCert, "cache-signing-cert", o.CacheSigningCert, "Code-signing certificate the shared cache's blobs are signed with")
	fs.StringVar(&o.CacheSigningKey, "cache-signing-key", o.CacheSigningKey, "Private key of --cache-signing-cert")
	fs.StringVar(&o.CacheCAFile, "cache-ca-file", o.CacheCAFile, "CA certificates the signatures of the shared cache's blobs must chain to")
	fs.StringVar(&o.ReflectorDBPath, "reflector-db-path", o.ReflectorDBPath, "SQLite database keeping the Kubernetes objects context-aware policies read (RFC 004), emptied at start and kept at exit (default: a file in a temporary directory, removed at exit)")
	fs.BoolVar(&o.NativeCELPolicy, "native-cel-policy", o.NativeCELPolicy, "Run Kubewarden's published cel-policy module natively, with the same answers; false runs its wasm (as --verification-path does, so that the module is verified)")
}

// ApplyEnv sets every flag not given on the command line from its
// environment variable.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env, ok := flagEnv[f.Name]
		if !ok || f.Changed {
			return
		}
		v := getenv(env)
		if v == "" {
			return
		}
		if f.Name == "policy-timeout" && !strings.ContainsAny(v, "smhµun") {
			v += "s" // Kubewarden's variable is a number of seconds
		}
		if f.Value.Type() == "bool" && env == "NO_COLOR" {
			v = "true" // NO_COLOR set to anything means no colour
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
		}
	})
	return errors.Join(errs...)
}

// NormalizeSeconds lets --policy-timeout take a bare number of seconds, as
// Kubewarden's does.
func NormalizeSeconds(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		switch {
		case strings.HasPrefix(a, "--policy-timeout="):
			v := strings.TrimPrefix(a, "--policy-timeout=")
			if isDigits(v) {
				out[i] = a + "s"
			}
		case a == "--policy-timeout" && i+1 < len(out) && isDigits(out[i+1]):
			out[i+1] += "s"
		}
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("--cert-file and --key-file go together"))
	}
	if len(o.ClientCAFiles) > 0 && o.CertFile == "" {
		errs = append(errs, errors.New("--client-ca-file requires --cert-file and --key-file"))
	}
	if o.Workers <= 0 {
		errs = append(errs, errors.New("--workers must be positive"))
	}
	if o.PolicyTimeout <= 0 {
		errs = append(errs, errors.New("--policy-timeout must be positive"))
	}
	if o.MemoryLimitMiB <= 0 || o.MemoryLimitMiB > 4096 {
		errs = append(errs, errors.New("--memory-limit must be between 1 and 4096 MiB"))
	}
	if o.MaxRequestBodySize <= 0 {
		errs = append(errs, errors.New("--max-request-body-bytes must be positive"))
	}
	if o.MaxInFlightBodyBytes < 0 || (o.MaxInFlightBodyBytes > 0 && o.MaxInFlightBodyBytes < o.MaxRequestBodySize) {
		errs = append(errs, errors.New("--max-in-flight-request-body-bytes must be 0 or at least --max-request-body-bytes"))
	}
	if o.MaxHostCallBytes <= 0 {
		errs = append(errs, errors.New("--max-host-call-payload-bytes must be positive"))
	}
	if o.MaxResponseBytes <= 0 {
		errs = append(errs, errors.New("--max-policy-response-bytes must be positive"))
	}
	if o.FetchConnectTimeout <= 0 || o.FetchIdleTimeout <= 0 || o.FetchTimeout <= 0 {
		errs = append(errs, errors.New("--fetch-connect-timeout, --fetch-idle-timeout and --fetch-timeout must be positive"))
	}
	if o.RequestReadTimeout <= 0 {
		errs = append(errs, errors.New("--request-read-timeout must be positive"))
	}
	if _, err := certwatch.ParseMinVersion(o.TLSMinVersion); err != nil {
		errs = append(errs, fmt.Errorf("--tls-min-version: %w", err))
	}
	if _, err := certwatch.ParseCipherSuites(o.TLSCipherSuites); err != nil {
		errs = append(errs, fmt.Errorf("--tls-cipher-suites: %w", err))
	}
	if o.SharedCacheDir != "" {
		if o.CacheDir == "" {
			errs = append(errs, errors.New("--shared-cache-dir requires --cache-dir (the replica's private cache)"))
		}
		if o.CacheSigningCert == "" || o.CacheSigningKey == "" || o.CacheCAFile == "" {
			errs = append(errs, errors.New("--shared-cache-dir requires --cache-signing-cert, --cache-signing-key and --cache-ca-file"))
		}
	}
	if o.PolicyServerName != "" {
		if o.PodNamespace == "" {
			errs = append(errs, errors.New("--policy-server-name requires --pod-namespace"))
		}
		if _, err := replicaOrdinal(o.PodName); err != nil {
			errs = append(errs, fmt.Errorf("--policy-server-name requires --pod-name: %w", err))
		}
	}
	return errors.Join(errs...)
}
