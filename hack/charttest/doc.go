// Package charttest tests the Helm chart charts/warden. Its tests render the
// chart with Helm's Go library the way `helm install` does, decode every
// object strictly into its Kubernetes type, validate the default
// PolicyServer with the CRD's schema and CEL rules, lint the chart, and check
// that the chart's CRDs and controller RBAC rules are the ones generated into
// config/ (hack/sync-chart-crds.sh copies them).
//
// It is a module of its own so that the main module does not depend on
// Helm; it imports nothing from the main module, only reads its files. Run
// it with hack/chart-test.sh.
package charttest
