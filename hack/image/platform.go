package main

import (
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// platform is an image platform: linux/amd64, linux/arm64, linux/arm/v7.
type platform struct {
	OS, Arch, Variant string
}

// parsePlatforms parses a comma-separated list of os/arch[/variant].
// Images run on Linux only; a variant is accepted for arm (v6, v7), where it
// sets GOARM, and as v8 for arm64.
func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	seen := map[platform]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "/")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("%q: want os/arch or os/arch/variant", item)
		}
		p := platform{OS: parts[0], Arch: parts[1]}
		if len(parts) == 3 {
			p.Variant = parts[2]
		}
		if p.OS != "linux" {
			return nil, fmt.Errorf("%q: the images are for linux only", item)
		}
		switch {
		case p.Variant == "":
		case p.Arch == "arm" && (p.Variant == "v6" || p.Variant == "v7"):
		case p.Arch == "arm64" && p.Variant == "v8":
		default:
			return nil, fmt.Errorf("%q: unsupported variant %s", item, p.Variant)
		}
		if seen[p] {
			return nil, fmt.Errorf("%q given twice", item)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("no platform given")
	}
	return out, nil
}

func (p platform) String() string {
	if p.Variant != "" {
		return p.OS + "/" + p.Arch + "/" + p.Variant
	}
	return p.OS + "/" + p.Arch
}

// goEnv is the environment that makes the go command build for p.
func (p platform) goEnv() []string {
	env := []string{"GOOS=" + p.OS, "GOARCH=" + p.Arch}
	if p.Arch == "arm" && p.Variant != "" {
		env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	return env
}

// v1 is p as go-containerregistry writes it in image indexes.
func (p platform) v1() v1.Platform {
	return v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}
}
