// Command versioncmd is the test fixture of hack/image: the smallest main
// package that reports its version the way Warden's binaries do, so that
// the image test builds it in seconds rather than a real binary in minutes.
package main

import (
	"fmt"
	"os"

	"github.com/wardenhq/warden/internal/buildinfo"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Printf("versioncmd (Warden) %s\n", buildinfo.String())
		return
	}
	fmt.Fprintln(os.Stderr, "usage: versioncmd --version")
	os.Exit(2)
}
