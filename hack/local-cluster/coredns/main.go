// Command coredns is the cluster DNS of hack/local-cluster.sh: CoreDNS,
// built from its Go module (the version pinned in go.mod beside this file),
// with only the plugins the local cluster's Corefile uses linked in. Importing
// a plugin package registers it; CoreDNS's own main imports every plugin,
// which would compile the cloud providers' SDKs for nothing.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() {
	coremain.Run()
}
