package wardenctl

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wardenhq/warden/internal/engine"
)

// storeEntry is one module of the local store.
type storeEntry struct {
	URI    string // registry://..., https://..., http://...
	Path   string // the file
	Digest string // hex sha256 of the file
	Size   int64
}

// storeSchemes are the top-level directories of the store
// (docs/compatibility.md#fetching-policies).
var storeSchemes = []string{"registry", "https", "http"}

// listStore returns the modules of the store at dir, sorted by URI. A
// missing store is empty. Temporary files of downloads in progress are
// skipped.
func listStore(dir string) ([]storeEntry, error) {
	var out []storeEntry
	for _, scheme := range storeSchemes {
		root := filepath.Join(dir, scheme)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && p == root {
					return fs.SkipDir
				}
				return err
			}
			if d.IsDir() || strings.HasPrefix(d.Name(), ".") {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			e, err := readStoreEntry(scheme+"://"+filepath.ToSlash(rel), p)
			if err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the store %s: %w", dir, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

func readStoreEntry(uri, path string) (storeEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return storeEntry{}, err
	}
	sum := sha256.Sum256(b)
	return storeEntry{URI: uri, Path: path, Digest: hex.EncodeToString(sum[:]), Size: int64(len(b))}, nil
}

// isHexPrefix reports whether s could be the start of a hex sha256: kwctl
// accepts such a prefix wherever a policy already in the store is expected.
func isHexPrefix(s string) bool {
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) < 4 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// findInStore returns the store entries whose URI is uri (a bare reference
// means registry://) or whose digest starts with uri.
func findInStore(dir, uri string) ([]storeEntry, error) {
	entries, err := listStore(dir)
	if err != nil {
		return nil, err
	}
	want := uri
	if !strings.Contains(want, "://") {
		want = "registry://" + want
	}
	prefix := ""
	if isHexPrefix(uri) {
		prefix = strings.TrimPrefix(uri, "sha256:")
	}
	var out []storeEntry
	for _, e := range entries {
		if e.URI == want || (prefix != "" && strings.HasPrefix(e.Digest, prefix)) ||
			(!strings.Contains(lastElem(want), ":") && e.URI == want+":latest") {
			out = append(out, e)
		}
	}
	return out, nil
}

func lastElem(uri string) string { return uri[strings.LastIndexByte(uri, '/')+1:] }

// policyRef is a policy named on the command line, resolved.
type policyRef struct {
	// URI names the policy for people and manifests: registry://...,
	// https://..., file:///abs/path, builtin://cel, builtin://vap or
	// builtin://map.
	URI string
	// Fetch is what to hand the fetcher: URI, or the file:// URI of the
	// store's copy when the policy was named by a digest prefix.
	Fetch string
}

// resolvePolicy resolves a policy argument as kwctl does: a URI
// (registry://, https://, http://, file://, or Warden's native modules
// builtin://cel, builtin://vap and builtin://map), a
// local path (a missing scheme means file://, relative to the working
// directory), or the digest prefix of a policy in the store.
func (a *app) resolvePolicy(arg string) (policyRef, error) {
	if arg == "" {
		return policyRef{}, &usageError{errors.New("the policy is empty")}
	}
	if arg == engine.NativeCELModule || isKubePolicyModule(arg) {
		return policyRef{URI: arg, Fetch: arg}, nil
	}
	if scheme, rest, ok := strings.Cut(arg, "://"); ok {
		switch scheme {
		case "registry", "https", "http":
			return policyRef{URI: arg, Fetch: arg}, nil
		case "file":
			u, err := fileURI(rest)
			return policyRef{URI: u, Fetch: u}, err
		default:
			return policyRef{}, fmt.Errorf("policy %s: unknown scheme %q (want registry, https, http, file, or builtin://cel, builtin://vap or builtin://map)", arg, scheme)
		}
	}
	if _, err := os.Stat(arg); err == nil {
		u, err := fileURI(arg)
		return policyRef{URI: u, Fetch: u}, err
	}
	if isHexPrefix(arg) {
		entries, err := findInStore(a.storeDir(), arg)
		if err != nil {
			return policyRef{}, err
		}
		switch {
		case len(entries) > 0 && sameDigest(entries):
			// Several URIs of the same module: any copy will do.
			return policyRef{URI: entries[0].URI, Fetch: "file://" + entries[0].Path}, nil
		case len(entries) == 0:
		default:
			return policyRef{}, fmt.Errorf("policy %s: the digest prefix matches %d policies of the store: give more digits", arg, len(entries))
		}
	}
	hint := ""
	if strings.Contains(arg, "/") && strings.Contains(lastElem(arg), ":") {
		hint = fmt.Sprintf(" (for a registry, write registry://%s)", arg)
	}
	return policyRef{}, fmt.Errorf("policy %s: no such file, and no policy of the store has that digest%s", arg, hint)
}

// fileURI returns the file:// URI of a path, made absolute.
func fileURI(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// removeFromStore deletes a store file and the directories it leaves empty,
// up to the store root.
func removeFromStore(dir string, e storeEntry) error {
	if err := os.Remove(e.Path); err != nil {
		return fmt.Errorf("removing %s: %w", e.URI, err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(e.Path); ; d = filepath.Dir(d) {
		abs, err := filepath.Abs(d)
		if err != nil || abs == root || !strings.HasPrefix(abs, root+string(filepath.Separator)) {
			return nil
		}
		if os.Remove(abs) != nil { // not empty
			return nil
		}
	}
}

// sameDigest reports whether every entry holds the same module.
func sameDigest(entries []storeEntry) bool {
	for _, e := range entries[1:] {
		if e.Digest != entries[0].Digest {
			return false
		}
	}
	return true
}
