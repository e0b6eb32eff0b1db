package certwatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/wardenhq/warden/internal/observability"
)

// DefaultResyncInterval is how often [Watcher.Run] re-reads the files even
// without a file system event, as a safety net for missed events (and for
// files that are symlinks into directories that are not watched).
const DefaultResyncInterval = 30 * time.Second

// settleDelay is how long Run waits after the first event of a burst before
// reloading, so that a certificate and key written one after the other are
// usually read together.
const settleDelay = 100 * time.Millisecond

// Log messages.
const (
	msgCertReloaded     = "TLS serving certificate reloaded"
	msgCertReloadFailed = "TLS serving certificate reload failed, keeping the previous one"
	msgCAReloaded       = "TLS client CA reloaded"
	msgCAReloadFailed   = "TLS client CA reload failed, keeping the previous one"
	msgWatchError       = "TLS file watch error"
	msgWatching         = "watching TLS files"
)

// Watcher serves the certificate and key in certFile/keyFile and reloads them
// when the files change; with client CA files, it also reloads the pool of CAs
// that client certificates must chain to.
//
// Its methods are safe for concurrent use; the configurations returned by
// [Watcher.TLSConfig] always present the last certificate and CAs that loaded
// successfully.
type Watcher struct {
	certFile, keyFile string
	caFiles           []string
	logger            *slog.Logger
	resync            time.Duration
	settle            time.Duration

	cert atomic.Pointer[tls.Certificate]
	cas  atomic.Pointer[x509.CertPool] // nil without client CA files

	mu sync.Mutex // serialises reloads and guards the fields below
	// Contents of the files behind cert and cas, to skip unchanged files.
	certPEM, keyPEM []byte
	caPEM           [][]byte
	// The last failure logged, to log a broken file once rather than at
	// every re-check.
	lastCertFailure, lastCAFailure string
}

// New loads the certificate and key in certFile and keyFile (PEM; certFile
// may hold the chain after the leaf) and, if clientCAFiles is not empty, the
// client CA certificates in those files (PEM, at least one per file). It
// returns an error if any of them does not load; nothing is watched until
// [Watcher.Run]. A nil logger discards logs.
func New(certFile, keyFile string, clientCAFiles []string, logger *slog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		certFile: certFile,
		keyFile:  keyFile,
		caFiles:  slices.Clone(clientCAFiles),
		logger:   logger,
		resync:   DefaultResyncInterval,
		settle:   settleDelay,
	}
	certPEM, keyPEM, cert, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	w.cert.Store(cert)
	w.certPEM, w.keyPEM = certPEM, keyPEM
	if len(w.caFiles) > 0 {
		caPEM, pool, err := loadCAs(w.caFiles)
		if err != nil {
			return nil, err
		}
		w.cas.Store(pool)
		w.caPEM = caPEM
	}
	return w, nil
}

// TLSConfig returns a new server configuration, for tls.Listen or
// http.Server.TLSConfig, that presents the current certificate (TLS 1.2 at
// least, with the [DefaultCipherSuites] under TLS 1.2; set MinVersion and
// CipherSuites on the result to change them). With client CA files, every client must present a certificate that
// chains to the current CAs (tls.RequireAndVerifyClientCert); as the CAs can
// change, they are set per connection through GetConfigForClient, which
// starts from a copy of the returned configuration as it is at handshake time,
// so settings added to it later (NextProtos, as http.Server does) still apply.
func (w *Watcher) TLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   DefaultCipherSuites(),
		GetCertificate: w.getCertificate,
	}
	if len(w.caFiles) == 0 {
		return cfg
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = w.cas.Load() // for code that inspects the config; replaced per connection
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = w.cas.Load()
		return c, nil
	}
	return cfg
}

func (w *Watcher) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return w.cert.Load(), nil
}

// Run watches the directories holding the files until ctx is done, reloading
// after changes (and once at the start, in case they changed since New) and
// every [DefaultResyncInterval]; it then returns nil. It returns an error if
// the watch cannot be set up or stops. Call it at most once.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating file watcher: %w", err)
	}
	defer fw.Close()

	names := map[string]bool{}
	var dirs []string
	for _, f := range append([]string{w.certFile, w.keyFile}, w.caFiles...) {
		abs, err := filepath.Abs(f)
		if err != nil {
			return fmt.Errorf("resolving %q: %w", f, err)
		}
		names[filepath.Base(abs)] = true
		if dir := filepath.Dir(abs); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	for _, dir := range dirs {
		if err := fw.Add(dir); err != nil {
			return fmt.Errorf("watching directory %q: %w", dir, err)
		}
	}

	// The files may have changed between New and the start of the watch.
	w.reload()
	w.logger.Debug(msgWatching, observability.KeyPath, strings.Join(dirs, ","))

	resync := time.NewTicker(w.resync)
	defer resync.Stop()
	settle := time.NewTimer(w.settle)
	settle.Stop()
	pending := false

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			if !relevant(ev, names) || pending {
				continue
			}
			pending = true
			settle.Reset(w.settle)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			// For example an event queue overflow: events may have been lost.
			w.logger.Warn(msgWatchError, observability.KeyError, err)
			w.reload()
		case <-settle.C:
			pending = false
			w.reload()
		case <-resync.C:
			w.reload()
		}
	}
}

// relevant reports whether ev may have changed one of the watched files: an
// event on one of their names, or on the "..data" symlink (and its siblings)
// that Kubernetes swaps when a mounted Secret changes. Chmod-only events are
// not.
func relevant(ev fsnotify.Event, names map[string]bool) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	base := filepath.Base(ev.Name)
	return names[base] || strings.HasPrefix(base, "..")
}

// reload re-reads the files and swaps in what changed and loads. Failures are
// logged (once per distinct failure) and leave the previous state in place.
func (w *Watcher) reload() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reloadPair()
	if len(w.caFiles) > 0 {
		w.reloadCAs()
	}
}

func (w *Watcher) reloadPair() {
	certPEM, keyPEM, cert, err := loadPair(w.certFile, w.keyFile)
	if err != nil {
		if msg := err.Error(); msg != w.lastCertFailure {
			w.lastCertFailure = msg
			w.logger.Warn(msgCertReloadFailed, observability.KeyPath, w.certFile, observability.KeyError, err)
		}
		return
	}
	w.lastCertFailure = ""
	if bytes.Equal(certPEM, w.certPEM) && bytes.Equal(keyPEM, w.keyPEM) {
		return
	}
	w.cert.Store(cert)
	w.certPEM, w.keyPEM = certPEM, keyPEM
	w.logger.Info(msgCertReloaded, observability.KeyPath, w.certFile)
}

func (w *Watcher) reloadCAs() {
	caPEM, pool, err := loadCAs(w.caFiles)
	if err != nil {
		if msg := err.Error(); msg != w.lastCAFailure {
			w.lastCAFailure = msg
			w.logger.Warn(msgCAReloadFailed, observability.KeyPath, strings.Join(w.caFiles, ","), observability.KeyError, err)
		}
		return
	}
	w.lastCAFailure = ""
	if slices.EqualFunc(caPEM, w.caPEM, bytes.Equal) {
		return
	}
	w.cas.Store(pool)
	w.caPEM = caPEM
	w.logger.Info(msgCAReloaded, observability.KeyPath, strings.Join(w.caFiles, ","))
}

// loadPair reads and parses a certificate and its key, checking that they
// match.
func loadPair(certFile, keyFile string) (certPEM, keyPEM []byte, cert *tls.Certificate, err error) {
	certPEM, err = os.ReadFile(certFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading certificate: %w", err)
	}
	keyPEM, err = os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loading certificate %q and key %q: %w", certFile, keyFile, err)
	}
	return certPEM, keyPEM, &pair, nil
}

// loadCAs reads the client CA files into a pool; each file must hold at least
// one certificate.
func loadCAs(files []string) ([][]byte, *x509.CertPool, error) {
	pool := x509.NewCertPool()
	contents := make([][]byte, 0, len(files))
	for _, f := range files {
		pemBytes, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("reading client CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, nil, fmt.Errorf("loading client CA %q: no PEM certificate found", f)
		}
		contents = append(contents, pemBytes)
	}
	return contents, pool, nil
}
