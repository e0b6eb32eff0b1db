package policyfetch

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/wardenhq/warden/internal/buildinfo"
	"github.com/wardenhq/warden/internal/observability"
)

// Log keys this package adds to observability's.
const (
	keyModule = "module"
	keyDigest = "sha256sum"
)

// maxModuleSize bounds what a download may bring; real policies are a few
// MiB.
const maxModuleSize = 256 << 20

var userAgent = "warden/" + buildinfo.String()

// wasmMagic starts every WebAssembly binary.
var wasmMagic = []byte("\x00asm")

// Options configures a Fetcher.
type Options struct {
	// StoreDir is the root of the local store (Kubewarden's
	// --policies-download-dir). Required.
	StoreDir string
	// Sources is sources.yml; nil means none.
	Sources *Sources
	// DockerConfigPath is Kubewarden's --docker-config-json-path: the
	// directory that holds config.json, or the file itself. Empty means
	// $DOCKER_CONFIG/config.json, else ~/.docker/config.json. The file is
	// read at every registry operation; a missing file means no
	// credentials.
	DockerConfigPath string
	// Logger receives debug records; nil discards them.
	Logger *slog.Logger
	// Verifier, when set, must accept every registry module before it is
	// stored or returned, and modules of other schemes are refused; nil
	// means no verification.
	Verifier Verifier
	// Progress, when set, hears how module downloads (registry layers and
	// https:// modules) advance; manifests and signatures are not
	// reported.
	Progress Progress
	// ConnectTimeout bounds connecting to a registry or HTTPS server,
	// the TLS handshake included; IdleTimeout bounds the wait for any
	// byte of an answer (its headers, or the next bytes of its body);
	// Timeout bounds a whole fetch, however fast the bytes come. Zero
	// means DefaultConnectTimeout, DefaultIdleTimeout, DefaultTimeout.
	ConnectTimeout, IdleTimeout, Timeout time.Duration
}

// Defaults of Options' timeouts.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 30 * time.Second
	DefaultTimeout        = 5 * time.Minute
)

// Module is a fetched policy module.
type Module struct {
	// URI is the module URI, normalised: a bare reference gains registry://,
	// an http(s) URL loses its default port.
	URI string
	// Path is the local file: in the store, or the file itself for file://.
	Path string
	// Digest is the sha256 of the module, "sha256:<hex>". For a registry
	// module it is the digest of its layer.
	Digest string
	// Bytes is the module as read. Callers that share a Module (concurrent
	// Fetch calls of the same URI get the same one) must not modify it.
	Bytes []byte
}

// Fetcher fetches modules into a local store. Its methods are safe for
// concurrent use; concurrent Fetch calls of the same URI share one
// download.
type Fetcher struct {
	store   string
	sources *Sources
	docker  string
	logger  *slog.Logger
	tr      *transport
	client  *http.Client // https:// and http:// modules
	auth    *auth.Client // registries
	flights flightGroup

	verifier Verifier
	progress Progress
	timeout  time.Duration // of a whole remote fetch
}

// New returns a Fetcher. It reads nothing and connects nowhere.
func New(opts Options) (*Fetcher, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("policyfetch: StoreDir is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tr := newTransport(opts.Sources, cmp.Or(opts.ConnectTimeout, DefaultConnectTimeout), cmp.Or(opts.IdleTimeout, DefaultIdleTimeout))
	client := &http.Client{Transport: tr}
	f := &Fetcher{
		store:   opts.StoreDir,
		sources: opts.Sources,
		docker:  opts.DockerConfigPath,
		logger:  logger,
		tr:      tr,
		client:  client,

		verifier: opts.Verifier,
		progress: opts.Progress,
		timeout:  cmp.Or(opts.Timeout, DefaultTimeout),
	}
	f.auth = &auth.Client{
		Client:     client,
		Header:     http.Header{"User-Agent": {userAgent}},
		Cache:      auth.NewCache(),
		Credential: f.credential,
	}
	return f, nil
}

// Close closes idle connections. The Fetcher stays usable.
func (f *Fetcher) Close() { f.tr.CloseIdleConnections() }

// Fetch returns the module at uri: registry://host/repo:tag,
// registry://host/repo@sha256:..., host/repo:tag, https://...,
// http://... (insecure sources only) or file:///path. A registry reference
// tagged latest is pulled every time; any other remote module comes from the
// store when it is there. Errors read "fetching <uri>: <cause>" on one line,
// and a failed fetch leaves nothing in the store.
//
// ctx bounds the wait, and with it the download, as do the Options'
// timeouts (connect, idle, and the whole fetch). Cancelling ctx makes this
// call return; the download goes on while other callers of the same URI
// still wait for it, and stops when none is left.
func (f *Fetcher) Fetch(ctx context.Context, uri string) (Module, error) {
	loc, err := parseURI(uri)
	if err != nil {
		return Module{}, fmt.Errorf("fetching %s: %w", uri, err)
	}
	if f.verifier != nil && loc.scheme != "registry" {
		return Module{}, fmt.Errorf("fetching %s: %w", loc.uri, errNotVerifiable)
	}
	if loc.scheme == "file" {
		m, err := readModule(loc.uri, loc.local)
		if err != nil {
			return Module{}, fmt.Errorf("fetching %s: %w", loc.uri, err)
		}
		return m, nil
	}
	m, err := f.flights.do(ctx, loc.uri, func(ctx context.Context) (Module, error) {
		ctx, cancel := context.WithTimeoutCause(ctx, f.timeout, &fetchTimeoutError{after: f.timeout})
		defer cancel()
		m, err := f.fetchRemote(ctx, loc)
		var timeout *fetchTimeoutError
		if err != nil && errors.As(context.Cause(ctx), &timeout) {
			return Module{}, timeout
		}
		return m, err
	})
	if err != nil {
		return Module{}, fmt.Errorf("fetching %s: %w", loc.uri, err)
	}
	return m, nil
}

func (f *Fetcher) fetchRemote(ctx context.Context, loc location) (Module, error) {
	dest := filepath.Join(f.store, filepath.FromSlash(loc.store))
	if f.verifier != nil {
		return f.fetchVerified(ctx, loc, dest)
	}
	if !loc.alwaysPull {
		m, err := readModule(loc.uri, dest)
		if err == nil {
			f.logger.DebugContext(ctx, "module reused from store", keyModule, loc.uri, observability.KeyPath, dest, keyDigest, m.Digest)
			return m, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return Module{}, err
		}
	}
	var (
		data []byte
		err  error
	)
	if loc.scheme == "registry" {
		data, err = f.pull(ctx, loc)
	} else {
		data, err = f.download(ctx, loc)
	}
	if err != nil {
		return Module{}, err
	}
	if !bytes.HasPrefix(data, wasmMagic) {
		return Module{}, errors.New("the module is not a WebAssembly binary (no \\0asm magic)")
	}
	if err := writeAtomic(dest, data); err != nil {
		return Module{}, err
	}
	m := newModule(loc.uri, dest, data)
	f.logger.DebugContext(ctx, "module pulled", keyModule, loc.uri, observability.KeyPath, dest, keyDigest, m.Digest)
	return m, nil
}

// download gets an https:// or http:// module.
func (f *Fetcher) download(ctx context.Context, loc location) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.uri, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, describe(err, loc.host, false)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server answered %s", resp.Status)
	}
	if resp.ContentLength > maxModuleSize {
		return nil, fmt.Errorf("the module is %d bytes, more than the %d limit", resp.ContentLength, maxModuleSize)
	}
	data, err := io.ReadAll(io.LimitReader(f.withProgress(ctx, resp.Body, resp.ContentLength), maxModuleSize+1))
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && resp.ContentLength > 0:
		return nil, causef(err, "download truncated: got %d of %d bytes", len(data), resp.ContentLength)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, causef(err, "download truncated after %d bytes", len(data))
	case err != nil:
		return nil, describe(err, loc.host, false)
	case len(data) > maxModuleSize:
		return nil, fmt.Errorf("the module is more than the %d bytes limit", maxModuleSize)
	}
	return data, nil
}

// fetchTimeoutError is a fetch that took longer than Options.Timeout.
type fetchTimeoutError struct{ after time.Duration }

func (e *fetchTimeoutError) Error() string {
	return fmt.Sprintf("gave up after %s (the fetch timeout)", e.after)
}

// Unwrap makes the fetch timeout a deadline, as errors.Is sees it.
func (e *fetchTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// readModule reads a module file (ReadFile).
func readModule(uri, path string) (Module, error) {
	data, err := ReadFile(path)
	if err != nil {
		return Module{}, err
	}
	return newModule(uri, path, data), nil
}

// ReadFile reads a module file: a regular file (a device such as
// /dev/zero, or a named pipe, is refused before it is opened, which could
// block) of at most 256 MiB, the bound of downloads.
func ReadFile(path string) ([]byte, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	f, err := os.Open(path) // also says why a path cannot be read
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() { // replaced since
		return nil, notRegular(path, st.Mode())
	}
	if st.Size() > maxModuleSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d limit", path, st.Size(), maxModuleSize)
	}
	// Read into a buffer of the size the file has, plus a byte that tells
	// whether it grew since: io.ReadAll alone would double its buffer up to
	// the size, twice the module's bytes allocated for a large one.
	data := make([]byte, st.Size()+1)
	n, err := io.ReadFull(f, data)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		data = data[:n] // as large as it was, or shrunk since
	case err != nil:
		return nil, err
	default: // grew since: read on, within the limit
		rest, err := io.ReadAll(io.LimitReader(f, maxModuleSize+1-int64(len(data))))
		if err != nil {
			return nil, err
		}
		data = append(data, rest...)
	}
	if len(data) > maxModuleSize { // grew since
		return nil, fmt.Errorf("%s is more than the %d bytes limit", path, maxModuleSize)
	}
	return data, nil
}

// notRegular is the error of a module path that is not a regular file.
func notRegular(path string, mode fs.FileMode) error {
	what := "not a regular file"
	switch {
	case mode.IsDir():
		what = "a directory"
	case mode&fs.ModeCharDevice != 0:
		what = "a character device"
	case mode&fs.ModeDevice != 0:
		what = "a device"
	case mode&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case mode&fs.ModeSocket != 0:
		what = "a socket"
	}
	return fmt.Errorf("%s is %s: a module must be a regular file", path, what)
}

func newModule(uri, path string, data []byte) Module {
	sum := sha256.Sum256(data)
	return Module{URI: uri, Path: path, Digest: "sha256:" + hex.EncodeToString(sum[:]), Bytes: data}
}

// writeAtomic writes data to dest through a temporary file in the same
// directory, so dest is either absent or complete.
func writeAtomic(dest string, data []byte) (err error) {
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating store directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+strings.ReplaceAll(filepath.Base(dest), ":", "_")+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing to the store: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing to the store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing to the store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing to the store: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing to the store: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("writing to the store: %w", err)
	}
	return nil
}
