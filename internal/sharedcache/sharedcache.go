// Package sharedcache keeps the machine code of compiled policy modules on
// a volume every replica of a policy server mounts (RFC 000's shared
// policy cache), so that a module is compiled once per cluster rather than
// once per replica.
//
// Anyone who can write to the volume could plant machine code the replicas
// would run, so every blob goes with a signature, made with a key whose
// certificate Warden's CA issued for code signing, and a blob is used only
// once its signature verifies against the CA. A blob that does not verify
// is removed, and the caller compiles the module again and stores the new
// code: nothing unverified stays on the volume.
//
// The layout is <dir>/<warden version>/<module sha256>/<name> and
// <name>.sig, where name is the file the compiler's own cache knows the
// code by (it depends on the compiler's version and the CPU's features, so
// replicas on different nodes may keep different blobs of one module).
// Keying by Warden's version keeps a new version from ever reading an old
// one's code, which the signature binds to its version too.
//
// It imports nothing from Warden but pki. Every method is safe for
// concurrent use, by several processes too: files are written under a
// temporary name and renamed into place.
package sharedcache

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wardenhq/warden/internal/pki"
)

// sigSuffix ends the name of a blob's signature file.
const sigSuffix = ".sig"

// Options configures a Store.
type Options struct {
	// Dir is the root of the shared volume.
	Dir string
	// Version is Warden's version: blobs of other versions are never read.
	Version string
	// CertFile and KeyFile are the code-signing certificate and key the
	// store signs with; CAFile holds the CA certificates a signature must
	// chain to. They are read on every use, so a renewed certificate or a
	// rotated CA takes effect without a restart.
	CertFile, KeyFile, CAFile string
}

// Store is a shared cache of compiled modules.
type Store struct {
	opts    Options
	dir     string // Dir/<version>
	refused atomic.Int64
}

// Blob is the compiled code of one module, by the name the compiler's
// cache gives it: a relative, slash-separated path.
type Blob struct {
	Name string
	Data []byte
}

// RefusedError says why a blob found in the cache was not used (and was
// removed).
type RefusedError struct {
	Path string
	Err  error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing cached module %s: %v", e.Path, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Open returns the store of opts, creating its directory. It checks that the
// signing key and certificates can be read, so that a misconfigured replica
// fails at start rather than at its first compilation.
func Open(opts Options) (*Store, error) {
	if opts.Version == "" || strings.ContainsAny(opts.Version, `/\`) || opts.Version == "." || opts.Version == ".." {
		return nil, fmt.Errorf("shared cache: %q is not a usable version", opts.Version)
	}
	s := &Store{opts: opts, dir: filepath.Join(opts.Dir, opts.Version)}
	if _, _, err := s.signer(); err != nil {
		return nil, err
	}
	if _, err := s.roots(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("shared cache: %w", err)
	}
	return s, nil
}

// Dir is the directory of this version's blobs.
func (s *Store) Dir() string { return s.dir }

// Refused is the number of blobs refused since the store was opened.
func (s *Store) Refused() int64 { return s.refused.Load() }

// Get returns the blobs of the module with the hex sha256 digest whose
// signatures verify. Those that do not are removed and returned as
// RefusedErrors, as are blobs without their signature.
func (s *Store) Get(digest string) ([]Blob, []error) {
	if !validDigest(digest) {
		return nil, []error{fmt.Errorf("shared cache: %q is not a sha256 digest", digest)}
	}
	var blobs []Blob
	var errs []error
	refuse := func(path string, err error) {
		s.refused.Add(1)
		errs = append(errs, &RefusedError{Path: path, Err: err})
		_ = os.Remove(path)
		_ = os.Remove(path + sigSuffix)
	}
	root := filepath.Join(s.dir, digest)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || isTemp(path) {
			return err
		}
		if strings.HasSuffix(path, sigSuffix) {
			return nil // read with its blob; one alone may be a Put under way
		}
		rel, _ := filepath.Rel(root, path)
		name := filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := s.verify(digest, name, data, path+sigSuffix); err != nil {
			refuse(path, err)
			return nil
		}
		blobs = append(blobs, Blob{Name: name, Data: data})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("shared cache: reading %s: %w", root, err))
	}
	return blobs, errs
}

// Put signs b and stores it as compiled code of the module with the hex
// sha256 digest, replacing what was there.
func (s *Store) Put(digest string, b Blob) error {
	if !validDigest(digest) {
		return fmt.Errorf("shared cache: %q is not a sha256 digest", digest)
	}
	if !validName(b.Name) {
		return fmt.Errorf("shared cache: %q is not a blob name", b.Name)
	}
	key, certPEM, err := s.signer()
	if err != nil {
		return err
	}
	sum := message(s.opts.Version, digest, b.Name, b.Data)
	sig, err := key.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return fmt.Errorf("shared cache: signing: %w", err)
	}
	envelope, err := json.Marshal(signature{Certificate: string(certPEM), Signature: sig})
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, digest, filepath.FromSlash(b.Name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("shared cache: %w", err)
	}
	// The signature goes first: a reader that sees the new blob then sees
	// its signature too (one that sees the old blob with the new
	// signature refuses it, and the code is compiled once more).
	if err := writeFile(path+sigSuffix, envelope); err != nil {
		return err
	}
	return writeFile(path, b.Data)
}

// Collect removes the blobs of every module whose digest keep does not
// hold, anything else in the version's directory that is not a module's
// directory, and what writers that died left behind. It returns the
// digests removed.
func (s *Store) Collect(keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("shared cache: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if keep[e.Name()] && e.IsDir() {
			errs = append(errs, removeStale(filepath.Join(s.dir, e.Name())))
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		if validDigest(e.Name()) {
			removed = append(removed, e.Name())
		}
	}
	return removed, errors.Join(errs...)
}

// signature is the content of a .sig file.
type signature struct {
	// Certificate is the signer's code-signing certificate, PEM.
	Certificate string `json:"certificate"`
	// Signature is the ASN.1 ECDSA signature of message.
	Signature []byte `json:"signature"`
}

// message is what a signature signs: the blob's bytes bound to the Warden
// version, the module and the name they were stored under, so that no
// valid blob can be moved to another module, name or version.
func message(version, digest, name string, data []byte) [sha256.Size]byte {
	sum := sha256.Sum256(data)
	return sha256.Sum256([]byte("warden shared policy cache v1\n" + version + "\n" + digest + "\n" + name + "\n" + hex.EncodeToString(sum[:])))
}

// verify checks the signature at sigPath of the blob data.
func (s *Store) verify(digest, name string, data []byte, sigPath string) error {
	raw, err := os.ReadFile(sigPath)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("no signature")
	} else if err != nil {
		return err
	}
	var sig signature
	if err := json.Unmarshal(raw, &sig); err != nil {
		return fmt.Errorf("unreadable signature: %w", err)
	}
	cert, err := pki.ParseCertificate([]byte(sig.Certificate))
	if err != nil {
		return fmt.Errorf("signer's certificate: %w", err)
	}
	roots, err := s.roots()
	if err != nil {
		return err
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}}); err != nil {
		return fmt.Errorf("signer's certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return errors.New("signer's certificate: not an ECDSA key")
	}
	sum := message(s.opts.Version, digest, name, data)
	if !ecdsa.VerifyASN1(pub, sum[:], sig.Signature) {
		return errors.New("the signature does not match the blob")
	}
	return nil
}

// signer reads the signing key and its certificate, and checks they match.
func (s *Store) signer() (*ecdsa.PrivateKey, []byte, error) {
	keyPEM, err := os.ReadFile(s.opts.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("shared cache: reading the signing key: %w", err)
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("shared cache: the signing key %s: %w", s.opts.KeyFile, err)
	}
	certPEM, err := os.ReadFile(s.opts.CertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("shared cache: reading the signing certificate: %w", err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("shared cache: the signing certificate %s: %w", s.opts.CertFile, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("shared cache: the signing key %s does not match the certificate %s", s.opts.KeyFile, s.opts.CertFile)
	}
	return key, certPEM, nil
}

// roots reads the CA certificates signatures must chain to.
func (s *Store) roots() (*x509.CertPool, error) {
	caPEM, err := os.ReadFile(s.opts.CAFile)
	if err != nil {
		return nil, fmt.Errorf("shared cache: reading the CA: %w", err)
	}
	certs, err := pki.ParseCertificates(caPEM)
	if err != nil {
		return nil, fmt.Errorf("shared cache: the CA %s: %w", s.opts.CAFile, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// writeFile writes data to path (WriteFile), as this cache's errors say.
func writeFile(path string, data []byte) error {
	if err := WriteFile(path, data); err != nil {
		return fmt.Errorf("shared cache: writing %s: %w", path, err)
	}
	return nil
}

// WriteFile writes data to path through a temporary file in its directory
// renamed into place, so that readers, in this process or another, see the
// old content or the new, never a part. The temporary file's name ends in
// .tmp.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// staleTemp is the age past which a temporary file is a dead writer's.
const staleTemp = 10 * time.Minute

// removeStale removes what writers that died left under dir, older than
// staleTemp: temporary files, and signatures without their blob.
func removeStale(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		orphan := false
		if strings.HasSuffix(path, sigSuffix) {
			_, err := os.Stat(strings.TrimSuffix(path, sigSuffix))
			orphan = errors.Is(err, fs.ErrNotExist)
		}
		if !isTemp(path) && !orphan {
			return nil
		}
		if info, err := d.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			return os.Remove(path)
		}
		return nil
	})
}

// isTemp reports a file writeFile has not renamed into place yet.
func isTemp(path string) bool { return strings.HasSuffix(path, ".tmp") }

func validDigest(d string) bool {
	if len(d) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil && strings.ToLower(d) == d
}

// validName accepts the relative paths the compiler's cache uses.
func validName(name string) bool {
	return name != "" && filepath.IsLocal(filepath.FromSlash(name)) && !strings.HasSuffix(name, sigSuffix) && !isTemp(name)
}
