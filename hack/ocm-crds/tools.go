//go:build tools

// Package ocmcrds records the Open Cluster Management API module, so that
// go.mod and go.sum pin it: its CRD YAML files sit beside these packages.
// It is never compiled.
package ocmcrds

import (
	// ManagedCluster (cluster/v1).
	_ "open-cluster-management.io/api/cluster/v1"
	// ManifestWork and AppliedManifestWork (work/v1).
	_ "open-cluster-management.io/api/work/v1"
)
