// Package dashboards tests what Warden ships for Prometheus and Grafana in
// its chart: every query of the Grafana dashboard
// (charts/warden/files/dashboards/warden.json) and every alert of the rule
// file (charts/warden/files/alerts/warden.rules.yaml) is evaluated with
// Prometheus's own query engine over metrics scraped from a policy server
// under a mix of requests and from the controller, and must return data
// (docs/monitoring.md). Tests only: it has no code of its own.
//
// The tests that run the policy server and the controller need an API
// server, like the cluster tier: build tag cluster, run by
// hack/dashboards-test.sh.
package dashboards
