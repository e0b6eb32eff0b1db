// Package buildinfo holds the version of the Warden binaries. It imports
// nothing from Warden.
package buildinfo

import "runtime/debug"

// Version is set at link time with
// -ldflags "-X github.com/wardenhq/warden/internal/buildinfo.Version=v1.2.3";
// otherwise it is the module version recorded in the binary, or "dev".
var Version = ""

// KubewardenVersion is the Kubewarden release whose behaviour Warden's
// binaries match; policies' minimumKubewardenVersion is checked against it.
const KubewardenVersion = "1.36.0"

// String returns the version.
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
