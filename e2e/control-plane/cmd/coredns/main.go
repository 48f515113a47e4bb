// Command coredns is CoreDNS with the few plugins a test cluster's DNS
// needs: cluster names from the API server (kubernetes), health and
// readiness endpoints, errors and a cache. It has no forward plugin: names
// outside the cluster get NXDOMAIN/SERVFAIL, and no query leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The directive order of CoreDNS's plugin.cfg, restricted to these plugins.
func init() {
	dnsserver.Directives = []string{"errors", "log", "health", "ready", "cache", "kubernetes"}
}

func main() { coremain.Run() }
