package policyfetch

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// location is a parsed module URI.
type location struct {
	uri    string // normalised: bare references get registry://, default ports go
	scheme string // registry, https, http or file
	host   string // host[:port] as sources.yml names it; empty for file
	// store is the path inside the store, slash-separated; local is the
	// file itself for file://.
	store, local string
	ref          registry.Reference // registry only
	alwaysPull   bool               // registry reference tagged latest
}

// parseURI parses a module URI the way Kubewarden does: anything without
// "://" is a registry reference.
func parseURI(raw string) (location, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if looksLikePath(raw) {
			return location{}, fmt.Errorf("%q is a file path, not a module URI: write it as file:///absolute/path/to/policy.wasm", raw)
		}
		scheme, rest = "registry", raw
	}
	switch scheme {
	case "registry":
		return parseRegistry(rest)
	case "https", "http":
		return parseHTTP(raw)
	case "file":
		return parseFile(raw)
	default:
		return location{}, fmt.Errorf("unknown scheme %q (want registry, https, http or file)", scheme)
	}
}

// parseRegistry parses host[:port]/repo[:tag][@digest]. The store path keeps
// the last element as written (name:tag, name@sha256:..., name:tag@sha256:...)
// and adds :latest when neither tag nor digest is given, as Kubewarden does.
func parseRegistry(s string) (location, error) {
	ref, err := parseReference(s)
	if err != nil {
		return location{}, err
	}
	name := s[strings.LastIndexByte(s, '/')+1:]
	tag, _, _ := strings.Cut(name, "@")
	_, tag, _ = strings.Cut(tag, ":")
	loc := location{
		uri:        "registry://" + s,
		scheme:     "registry",
		host:       ref.Registry,
		store:      path.Join("registry", s),
		ref:        ref,
		alwaysPull: tag == "latest" || ref.Reference == "",
	}
	if ref.Reference == "" {
		loc.store += ":latest"
	}
	return loc, nil
}

// parseReference parses a registry reference, with or without registry://.
func parseReference(s string) (registry.Reference, error) {
	s = strings.TrimPrefix(s, "registry://")
	ref, err := registry.ParseReference(s)
	if err != nil {
		return registry.Reference{}, fmt.Errorf("invalid registry reference %q: %w", s, err)
	}
	if strings.Contains(s, "//") || strings.HasSuffix(s, "/") {
		return registry.Reference{}, fmt.Errorf("invalid registry reference %q", s)
	}
	return ref, nil
}

// parseHTTP parses an http(s) URL. As in Kubewarden (Rust's url crate), the
// host is lower-cased, the default port dropped and the path kept escaped;
// the query does not reach the store path.
func parseHTTP(raw string) (location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return location{}, fmt.Errorf("invalid URL: %w", err)
	}
	if u.Host == "" || u.User != nil {
		return location{}, fmt.Errorf("invalid URL %q: want %s://host[:port]/path/file", raw, u.Scheme)
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" && !(u.Scheme == "https" && p == "443") && !(u.Scheme == "http" && p == "80") {
		host += ":" + p
	}
	u.Host = host
	elems := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	for _, e := range elems {
		if e == "" || e == "." || e == ".." {
			return location{}, fmt.Errorf("invalid URL %q: the path must name a file, without empty, . or .. elements", raw)
		}
	}
	u.Fragment = ""
	return location{
		uri:    u.String(),
		scheme: u.Scheme,
		host:   host,
		store:  path.Join(append([]string{u.Scheme, host}, elems...)...),
	}, nil
}

// parseFile parses file:///abs/path (or file://localhost/abs/path).
func parseFile(raw string) (location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return location{}, fmt.Errorf("invalid URL: %w", err)
	}
	if (u.Host != "" && u.Host != "localhost") || !path.IsAbs(u.Path) {
		return location{}, errors.New("a file URI must hold an absolute path: file:///path/to/policy.wasm")
	}
	return location{uri: raw, scheme: "file", local: u.Path}, nil
}

// looksLikePath reports whether a module reference without a scheme is a
// file path rather than a registry reference (host/repo:tag): it starts
// with ., / or ~, or names a .wasm file. Taken as a registry reference, it
// would send a DNS lookup of "." or of a file name.
func looksLikePath(ref string) bool {
	return strings.HasPrefix(ref, ".") || strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "~") ||
		strings.HasSuffix(ref, ".wasm")
}
