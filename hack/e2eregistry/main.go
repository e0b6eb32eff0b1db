// Command e2eregistry is the OCI registry of the end-to-end tier
// (test/e2e): go-containerregistry's in-memory registry on plain HTTP, packed
// as an image by hack/e2e.sh and run as a pod, so that policies are pushed
// with wardenctl and pulled by policy servers as they would be from any
// registry, with nothing pulled from outside the machine.
//
//	e2eregistry [-listen :5000]
//
// What it holds is lost when it stops.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2eregistry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":5000", "address to serve the registry on")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	srv := &http.Server{
		Addr:              *listen,
		Handler:           registry.New(registry.Logger(log.New(stderr, "", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(stderr, "e2eregistry: serving on %s\n", *listen)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintf(stderr, "e2eregistry: %v\n", err)
		return 1
	}
	return 0
}
