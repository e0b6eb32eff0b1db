package policyfetch

import "testing"

func TestParseURI(t *testing.T) {
	const dgst = "sha256:72b4569c3daee67abeaa64192fb53895d0edb2d44fa6e1d9d4c5d3f8ece09f6e"
	tests := []struct {
		in, uri, host, store string
		alwaysPull           bool
		wantErr              string
	}{
		{in: "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2", uri: "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2", host: "ghcr.io", store: "registry/ghcr.io/kubewarden/policies/pod-privileged:v0.2.2"},
		{in: "ghcr.io/kubewarden/policies/pod-privileged:v0.2.2", uri: "registry://ghcr.io/kubewarden/policies/pod-privileged:v0.2.2", host: "ghcr.io", store: "registry/ghcr.io/kubewarden/policies/pod-privileged:v0.2.2"},
		{in: "registry://host.example.com:1234/path/to/policy:tag", uri: "registry://host.example.com:1234/path/to/policy:tag", host: "host.example.com:1234", store: "registry/host.example.com:1234/path/to/policy:tag"},
		{in: "registry.local.lan:5000/policy:latest", uri: "registry://registry.local.lan:5000/policy:latest", host: "registry.local.lan:5000", store: "registry/registry.local.lan:5000/policy:latest", alwaysPull: true},
		{in: "registry://ghcr.io/kubewarden/policies/test", uri: "registry://ghcr.io/kubewarden/policies/test", host: "ghcr.io", store: "registry/ghcr.io/kubewarden/policies/test:latest", alwaysPull: true},
		{in: "registry://ghcr.io/k/p@" + dgst, uri: "registry://ghcr.io/k/p@" + dgst, host: "ghcr.io", store: "registry/ghcr.io/k/p@" + dgst},
		{in: "registry://ghcr.io/k/p:v1@" + dgst, uri: "registry://ghcr.io/k/p:v1@" + dgst, host: "ghcr.io", store: "registry/ghcr.io/k/p:v1@" + dgst},
		{in: "registry://ghcr.io/k/p:latest@" + dgst, uri: "registry://ghcr.io/k/p:latest@" + dgst, host: "ghcr.io", store: "registry/ghcr.io/k/p:latest@" + dgst, alwaysPull: true},
		{in: "https://github.com/kubewarden/pod-privileged-policy/releases/download/v0.1.6/policy.wasm", uri: "https://github.com/kubewarden/pod-privileged-policy/releases/download/v0.1.6/policy.wasm", host: "github.com", store: "https/github.com/kubewarden/pod-privileged-policy/releases/download/v0.1.6/policy.wasm"},
		{in: "https://Host.Example.com:443/p.wasm?x=1", uri: "https://host.example.com/p.wasm?x=1", host: "host.example.com", store: "https/host.example.com/p.wasm"},
		{in: "https://host.example.com:1234/a%2Fb/p.wasm", uri: "https://host.example.com:1234/a%2Fb/p.wasm", host: "host.example.com:1234", store: "https/host.example.com:1234/a%2Fb/p.wasm"},
		{in: "http://host.example.com:80/path/to/policy.wasm", uri: "http://host.example.com/path/to/policy.wasm", host: "host.example.com", store: "http/host.example.com/path/to/policy.wasm"},
		{in: "http://[::1]:8080/p.wasm", uri: "http://[::1]:8080/p.wasm", host: "[::1]:8080", store: "http/[::1]:8080/p.wasm"},
		{in: "file:///tmp/policy.wasm", uri: "file:///tmp/policy.wasm"},
		{in: "ftp://host/p.wasm", wantErr: `unknown scheme "ftp" (want registry, https, http or file)`},
		{in: "busybox", wantErr: `invalid registry reference "busybox": invalid reference: missing registry or repository`},
		{in: "registry://ghcr.io/Upper/x:v1", wantErr: `...invalid registry reference "ghcr.io/Upper/x:v1"`},
		{in: "registry://ghcr.io/x:bad/tag", wantErr: `...invalid registry reference`},
		{in: "https://host/a/../p.wasm", wantErr: `...without empty, . or .. elements`},
		{in: "https://host/dir/", wantErr: `...without empty, . or .. elements`},
		{in: "https:///p.wasm", wantErr: `...want https://host[:port]/path/file`},
		{in: "file://policy.wasm", wantErr: "a file URI must hold an absolute path: file:///path/to/policy.wasm"},
		{in: "./pod-privileged.wasm", wantErr: `"./pod-privileged.wasm" is a file path, not a module URI: write it as file:///absolute/path/to/policy.wasm`},
		{in: "/policies/p.wasm", wantErr: `"/policies/p.wasm" is a file path, not a module URI: write it as file:///absolute/path/to/policy.wasm`},
		{in: "policy.wasm", wantErr: `"policy.wasm" is a file path, not a module URI: write it as file:///absolute/path/to/policy.wasm`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			loc, err := parseURI(tc.in)
			if tc.wantErr != "" {
				checkErr(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if loc.uri != tc.uri || loc.host != tc.host || loc.store != tc.store || loc.alwaysPull != tc.alwaysPull {
				t.Errorf("got uri %q host %q store %q alwaysPull %v\nwant uri %q host %q store %q alwaysPull %v",
					loc.uri, loc.host, loc.store, loc.alwaysPull, tc.uri, tc.host, tc.store, tc.alwaysPull)
			}
		})
	}
}
