package wardenctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/wardenhq/warden/internal/admission"
	"github.com/wardenhq/warden/internal/engine"
	"github.com/wardenhq/warden/internal/hostcap"
	"github.com/wardenhq/warden/internal/metadata"
	"github.com/wardenhq/warden/internal/wasm"
)

// executionModes maps kwctl's --execution-mode values to metadata modes.
var executionModes = map[string]string{
	"kubewarden":      metadata.ModeWapc,
	"kubewarden-wapc": metadata.ModeWapc,
	"wasi":            metadata.ModeWASI,
	"opa":             metadata.ModeOPA,
	"gatekeeper":      metadata.ModeGatekeeper,
}

// parseExecutionMode returns the metadata mode of an --execution-mode value;
// "" stays "".
func parseExecutionMode(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	m, ok := executionModes[s]
	if !ok {
		return "", &usageError{fmt.Errorf("invalid --execution-mode %q: use opa, gatekeeper, kubewarden or wasi", s)}
	}
	return m, nil
}

// sessionOptions configure loadSession.
type sessionOptions struct {
	Remote RemoteOptions
	// ExecutionMode (a metadata mode, or "") runs modules without metadata
	// in that mode; a module whose metadata names another mode is refused.
	ExecutionMode string
	// DisableCache compiles every module afresh, without the on-disk cache.
	DisableCache bool
	// ContinueOnErrors keeps the policies that fail to load: they answer
	// every request with their error (test suites check such answers).
	ContinueOnErrors bool
	// HostCapabilities answers the policies' oci, net, crypto and kubernetes
	// host calls. Nil: registries (under Remote's sources and credentials),
	// DNS and certificates are answered, Kubernetes is not.
	HostCapabilities engine.HostCapabilities
	// MaxHostCallBytes and MaxResponseBytes are the runtime's caps on a
	// host call's payload and on a policy's answer (wasm.Config); 0: the
	// runtime's defaults.
	MaxHostCallBytes, MaxResponseBytes int
}

// session is a loaded engine and the runtime it runs on.
type session struct {
	rt      *wasm.Runtime
	eng     *engine.Engine
	closers []func() // run by Close
}

// loadSession loads policies into an engine configured as kwctl runs them
// (the caller's configs say protect mode and allowedToMutate), fetching
// remote modules into the store.
func (a *app) loadSession(ctx context.Context, configs map[string]*engine.PolicyConfig, o sessionOptions) (*session, error) {
	logger := a.logger()
	a.routeLibraryLogs()
	cfg := wasm.Config{Logger: logger, MaxHostCallBytes: o.MaxHostCallBytes, MaxResponseBytes: o.MaxResponseBytes}
	if !o.DisableCache {
		cfg.CacheDir = a.wasmCacheDir()
	}
	rt, err := wasm.NewRuntime(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the wasm runtime: %w", err)
	}
	f, err := a.fetcher(o.Remote, a.storeDir())
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	defer f.Close()
	var closers []func()
	caps := o.HostCapabilities
	if caps == nil {
		d, closeDirect, err := a.directHostCapabilities(o.Remote, nil)
		if err != nil {
			_ = rt.Close(ctx)
			return nil, err
		}
		caps, closers = hostcap.NewHost(d), append(closers, closeDirect)
	}
	eng, err := engine.Load(ctx, configs, engine.Options{
		Runtime:          rt,
		Logger:           logger,
		Workers:          1,
		CompatVersion:    compatVersion,
		ContinueOnErrors: o.ContinueOnErrors,
		HostCapabilities: caps,
		Fetch: func(ctx context.Context, uri string) ([]byte, error) {
			m, err := f.Fetch(ctx, uri)
			if err != nil {
				return nil, notValidated(uri, err)
			}
			b, err := adaptModule(ctx, m.Bytes, o.ExecutionMode, logger)
			if err != nil {
				return nil, fmt.Errorf("module %s: %w", uri, err)
			}
			return b, nil
		},
	})
	if err != nil {
		_ = rt.Close(ctx)
		for _, c := range closers {
			c()
		}
		return nil, err
	}
	return &session{rt: rt, eng: eng, closers: closers}, nil
}

// Close releases the engine, the runtime and what answered host calls.
func (s *session) Close(ctx context.Context) {
	s.eng.Close(ctx)
	_ = s.rt.Close(ctx)
	for _, c := range s.closers {
		c()
	}
}

// evaluate answers one request with policy id: a raw request when raw,
// else an AdmissionRequest.
func (s *session) evaluate(ctx context.Context, id string, req *admission.Request, raw json.RawMessage) (*admission.Response, error) {
	if raw != nil {
		return s.eng.ValidateRaw(ctx, id, admission.DecodeRawRequest(raw))
	}
	return s.eng.Validate(ctx, id, req, engine.OriginValidate)
}

// adaptModule makes a module runnable by the engine the way kwctl runs it:
// a module without metadata runs in the --execution-mode given (waPC by
// default, which Rego modules cannot be), with the metadata kwctl would
// assume; a module with metadata must agree with --execution-mode.
func adaptModule(ctx context.Context, module []byte, mode string, logger *slog.Logger) ([]byte, error) {
	meta, err := metadata.FromModule(module)
	switch {
	case errors.Is(err, metadata.ErrMissing):
		rego, err := isRego(module)
		if err != nil {
			return nil, err
		}
		switch {
		case mode == "" && rego:
			return nil, errors.New("the module is a Rego policy without metadata: run it with --execution-mode opa or gatekeeper, or annotate it")
		case mode == "":
			mode = metadata.ModeWapc
		case rego && mode != metadata.ModeOPA && mode != metadata.ModeGatekeeper:
			return nil, fmt.Errorf("the module is a Rego policy: execution mode %s needs a waPC or WASI module", mode)
		case !rego && (mode == metadata.ModeOPA || mode == metadata.ModeGatekeeper):
			return nil, fmt.Errorf("execution mode %s needs a Rego module (built with opa build -t wasm)", mode)
		}
		logger.DebugContext(ctx, "module has no metadata; assuming its execution mode", "execution_mode", mode)
		md := &metadata.Metadata{ExecutionMode: mode}
		if mode == metadata.ModeWapc {
			md.ProtocolVersion = metadata.ProtocolV1
		}
		return metadata.Embed(module, md)
	case err != nil:
		return nil, err
	}
	if mode != "" && meta.Mode() != mode {
		return nil, fmt.Errorf("the execution mode given, %s, is not the one of the policy's metadata, %s", mode, meta.Mode())
	}
	return module, nil
}

// readInput reads a file, or standard input for "-".
func (a *app) readInput(path string) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(a.in)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, nil
}

// decodeRequest reads a request file: an AdmissionReview, or a bare
// AdmissionRequest, in JSON or YAML. For a raw policy it returns the raw
// request: the value of a top-level "request" key, else the whole document.
func decodeRequest(doc []byte, raw bool) (*admission.Request, json.RawMessage, error) {
	js, err := toJSON(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding the request: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		if raw {
			return nil, js, nil // any JSON value is a raw request
		}
		return nil, nil, fmt.Errorf("decoding the request: it must be an AdmissionReview or an AdmissionRequest object: %w", err)
	}
	inner, wrapped := top["request"]
	if !wrapped && !raw && isReview(top) {
		return nil, nil, fmt.Errorf("decoding the request: %w", admission.ErrNoRequest)
	}
	if raw {
		if wrapped {
			return nil, inner, nil
		}
		return nil, js, nil
	}
	if wrapped {
		js = inner
	}
	if isNullJSON(js) {
		return nil, nil, admission.ErrNoRequest
	}
	req, err := admission.DecodeRequest(js)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding the request: %w", err)
	}
	if req.Operation == "" && req.Kind.Kind == "" {
		return nil, nil, errors.New("decoding the request: it has neither operation nor kind: is it an AdmissionReview or an AdmissionRequest?")
	}
	return req, nil, nil
}

// isReview reports whether a decoded document is an AdmissionReview (its
// kind says so), which is never an AdmissionRequest: that one's kind is an
// object.
func isReview(top map[string]json.RawMessage) bool {
	var kind string
	return json.Unmarshal(top["kind"], &kind) == nil && kind == "AdmissionReview"
}

// toJSON converts a YAML or JSON document to compact JSON, which is what
// kwctl and Kubewarden's policy server hand a guest (they re-serialise the
// request and the settings): a guest that reads bytes sees the same under
// wardenctl. Compact JSON is kept as it is, without a copy.
func toJSON(doc []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(doc)
	if len(trimmed) == 0 {
		return nil, errors.New("the document is empty")
	}
	if json.Valid(trimmed) {
		return compactJSON(trimmed), nil
	}
	return yaml.YAMLToJSON(doc) // json.Marshal's output: compact
}

// compactJSON returns valid JSON without insignificant white space: js
// itself when it has none.
func compactJSON(js []byte) []byte {
	if isCompactJSON(js) {
		return js
	}
	var b bytes.Buffer
	b.Grow(len(js))
	if err := json.Compact(&b, js); err != nil {
		return js // not valid JSON: the decoder that reads it says why
	}
	return b.Bytes()
}

// isCompactJSON reports whether valid JSON js has no white space outside
// its strings.
func isCompactJSON(js []byte) bool {
	inString, escaped := false, false
	for _, c := range js {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

func isNullJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// SettingsOptions are the flags that give a policy its settings.
type SettingsOptions struct {
	// SettingsPath is a YAML or JSON file.
	SettingsPath string
	// SettingsJSON is the settings as a JSON string.
	SettingsJSON string
}

// Validate refuses both flags at once.
func (o *SettingsOptions) Validate() error {
	if o.SettingsPath != "" && o.SettingsJSON != "" {
		return &usageError{errors.New("--settings-path and --settings-json cannot be used together")}
	}
	return nil
}

// load returns the settings as JSON: {} when none is given.
func (o *SettingsOptions) load() (json.RawMessage, error) {
	var doc []byte
	switch {
	case o.SettingsJSON != "":
		doc = []byte(o.SettingsJSON)
	case o.SettingsPath != "":
		b, err := os.ReadFile(o.SettingsPath)
		if err != nil {
			return nil, fmt.Errorf("reading settings: %w", err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return json.RawMessage("{}"), nil
		}
		doc = b
	default:
		return json.RawMessage("{}"), nil
	}
	js, err := toJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("decoding settings: %w", err)
	}
	if !strings.HasPrefix(string(js), "{") {
		return nil, errors.New("decoding settings: the settings must be an object")
	}
	return js, nil
}

// defaultMaxRequestFileBytes is the default of --max-request-file-bytes:
// the policy server's default --max-request-body-bytes.
const defaultMaxRequestFileBytes = 16 << 20

// readRequestFile reads a request file, or standard input for "-", of at
// most limit bytes: a regular file over it is refused before any of it is
// read, anything else once limit bytes have been read.
func (a *app) readRequestFile(path string, limit int64) ([]byte, error) {
	over := func(what string) error {
		return fmt.Errorf("%s, over the limit of %d bytes (--max-request-file-bytes)", what, limit)
	}
	var r io.Reader = a.in
	name := "standard input"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
			return nil, over(fmt.Sprintf("the request file %s is %d bytes", path, fi.Size()))
		}
		r, name = f, path
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, over("the request in " + name + " is more than that")
	}
	return b, nil
}
