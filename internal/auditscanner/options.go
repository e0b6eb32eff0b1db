package auditscanner

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/wardenhq/warden/internal/observability"
)

// Values of --report-kind (docs/compatibility.md#audit-scanner). "openreport"
// is how Kubewarden's help spells the first one; both are accepted.
const (
	ReportKindOpenReports  = "openreports"
	ReportKindOpenReport   = "openreport"
	ReportKindPolicyReport = "policyreport"
)

// Options configure one run of the audit scanner. Their flags are Kubewarden's
// (docs/compatibility.md#audit-scanner), with its defaults, except --loglevel,
// which defaults to info; --disable-result-reuse, --keep-unchanged-reports, --metrics-file, --metrics-pushgateway-url,
// --kube-api-qps, --kube-api-burst and --disable-kubernetes-policies are
// Warden's.
type Options struct {
	// Namespace scans this namespace only (-n).
	Namespace string
	// Cluster scans the cluster-wide resources only (-c).
	Cluster bool
	// KubewardenNamespace is where the PolicyServers' Services are, and a
	// namespace never scanned (-k).
	KubewardenNamespace string
	// PolicyServerURL, when set, receives every /audit request instead of
	// the PolicyServers' Services, which are then not looked up (-u).
	PolicyServerURL string
	// LogLevel is debug, info, warning (or warn) or error (-l).
	LogLevel string
	// OutputScan prints every report of the run on stdout, one JSON object
	// per line (-o).
	OutputScan bool
	// IgnoreNamespaces are never scanned (-i), nor is KubewardenNamespace.
	IgnoreNamespaces []string
	// InsecureSSL skips the verification of the policy servers' certificates.
	InsecureSSL bool
	// ExtraCA is a PEM file of CA certificates trusted, besides the system
	// ones, for the policy servers' certificates (-f).
	ExtraCA string
	// ClientCert and ClientKey are the PEM client certificate and key
	// presented to the policy servers (mutual TLS); both or neither.
	ClientCert string
	ClientKey  string
	// DisableStore writes no report to the cluster (and deletes none).
	DisableStore bool
	// DisableResultReuse evaluates every object again, also those whose
	// report was computed from the same object and policies
	// (AnnotationInputs).
	DisableResultReuse bool
	// KeepUnchangedReports (the default) leaves a report whose results did
	// not change as it is, run-uid label included, and deletes the scope's
	// reports of objects the run did not audit by name rather than by the
	// run-uid selector: the run-uid label names the run that last wrote the
	// report. False is Kubewarden's behaviour: every report gets the run's
	// uid as a label patch, the whole cost of an unchanged run on the API
	// server, and the stale ones are those without it.
	KeepUnchangedReports bool
	// ParallelNamespaces, ParallelResources and ParallelPolicies bound the
	// namespaces scanned at once, the resources of one scope audited at
	// once, and the policies evaluated at once for one resource.
	ParallelNamespaces int
	ParallelResources  int
	ParallelPolicies   int
	// PageSize is the limit of each list request.
	PageSize int
	// ReportKind is openreports (or openreport) or policyreport.
	ReportKind string
	// MetricsFile, when set, receives the metrics of the run in the
	// Prometheus text format, replaced atomically (for node_exporter's
	// textfile collector).
	MetricsFile string
	// MetricsPushgatewayURL, when set, is the Prometheus Pushgateway the
	// metrics of the run are pushed to, as the job MetricsJob.
	MetricsPushgatewayURL string
	// KubeAPIQPS and KubeAPIBurst bound the client-side rate of requests to
	// the API server; a negative QPS disables the client-side limit. The
	// requests in flight are bounded anyway, by --parallel-namespaces times
	// --parallel-resources, and the API server's priority and fairness
	// protects it: the defaults only stop a runaway, where client-go's (5
	// per second) or controller-runtime's (20) would make writing thousands
	// of reports take minutes.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// DisableKubernetesPolicies leaves the cluster's
	// ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their
	// bindings out of the audit.
	DisableKubernetesPolicies bool
}

// DefaultOptions returns the defaults of every option: Kubewarden's binary
// defaults (docs/compatibility.md#audit-scanner), and info for the log level.
func DefaultOptions() Options {
	return Options{
		KubewardenNamespace: "kubewarden",
		LogLevel:            "info",
		ParallelNamespaces:  1,
		ParallelResources:   100,
		ParallelPolicies:    5,
		PageSize:            100,
		ReportKind:          ReportKindPolicyReport,
		KubeAPIQPS:          500,
		KubeAPIBurst:        1000,
		// Warden's choice, not Kubewarden's (docs/compatibility.md).
		KeepUnchangedReports: true,
	}
}

// AddFlags registers the options on fs, with their current values as the
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Scan the resources of this namespace only")
	fs.BoolVarP(&o.Cluster, "cluster", "c", o.Cluster, "Scan the cluster-wide resources only")
	fs.StringVarP(&o.KubewardenNamespace, "kubewarden-namespace", "k", o.KubewardenNamespace, "Namespace of the PolicyServers' Services; never scanned")
	fs.StringVarP(&o.PolicyServerURL, "policy-server-url", "u", o.PolicyServerURL, "Send every audit request to this base URL (for example https://localhost:3000) instead of the PolicyServers' Services, for debugging out of the cluster")
	fs.StringVarP(&o.LogLevel, "loglevel", "l", o.LogLevel, "Log level: debug, info, warning, error")
	fs.BoolVarP(&o.OutputScan, "output-scan", "o", o.OutputScan, "Print every report of the run on stdout, one JSON object per line")
	fs.StringSliceVarP(&o.IgnoreNamespaces, "ignore-namespaces", "i", o.IgnoreNamespaces, "Namespaces never scanned (comma separated; repeatable)")
	fs.BoolVar(&o.InsecureSSL, "insecure-ssl", o.InsecureSSL, "Do not verify the certificates of the policy servers (development only)")
	fs.StringVarP(&o.ExtraCA, "extra-ca", "f", o.ExtraCA, "PEM file of CA certificates trusted for the policy servers' certificates, besides the system ones")
	fs.StringVar(&o.ClientCert, "client-cert", o.ClientCert, "PEM client certificate presented to the policy servers (mutual TLS); needs --client-key")
	fs.StringVar(&o.ClientKey, "client-key", o.ClientKey, "PEM private key of --client-cert")
	fs.BoolVar(&o.DisableStore, "disable-store", o.DisableStore, "Do not write reports to the cluster")
	fs.BoolVar(&o.DisableResultReuse, "disable-result-reuse", o.DisableResultReuse, "Evaluate every object again, also those whose report was computed from the same version of the object and of its policies")
	fs.BoolVar(&o.KeepUnchangedReports, "keep-unchanged-reports", o.KeepUnchangedReports, "Leave a report whose results did not change as it is, run-uid label included, and delete the reports of resources no longer audited by name: no write for an unchanged report. --keep-unchanged-reports=false relabels every report with the run's uid and deletes the reports without it, as Kubewarden does")
	fs.BoolVar(&o.DisableKubernetesPolicies, "disable-kubernetes-policies", o.DisableKubernetesPolicies, "Do not audit the cluster's ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their bindings")
	fs.IntVar(&o.ParallelNamespaces, "parallel-namespaces", o.ParallelNamespaces, "Namespaces scanned at once")
	fs.IntVar(&o.ParallelResources, "parallel-resources", o.ParallelResources, "Resources of one namespace (or of the cluster-wide scan) audited at once")
	fs.IntVar(&o.ParallelPolicies, "parallel-policies", o.ParallelPolicies, "Policies evaluated at once for one resource")
	fs.IntVar(&o.PageSize, "page-size", o.PageSize, "Objects asked for in each list request to the API server")
	fs.StringVar(&o.ReportKind, "report-kind", o.ReportKind, "Kind of the reports written: openreports (openreports.io Report, ClusterReport) or policyreport (wgpolicyk8s.io PolicyReport, ClusterPolicyReport)")
	fs.StringVar(&o.MetricsFile, "metrics-file", o.MetricsFile, "Write the metrics of the run to this file, in the Prometheus text format (for node_exporter's textfile collector)")
	fs.StringVar(&o.MetricsPushgatewayURL, "metrics-pushgateway-url", o.MetricsPushgatewayURL, "Push the metrics of the run to this Prometheus Pushgateway, as the job "+MetricsJob)
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second to the API server, at most, on average (negative: no client-side limit)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Requests to the API server in a burst above --kube-api-qps, at most")
}

// Validate reports the first options that cannot work together.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace != "" && o.Cluster {
		errs = append(errs, errors.New("--namespace and --cluster cannot be given together: --cluster scans the cluster-wide resources only, --namespace one namespace only"))
	}
	if _, err := o.useOpenReports(); err != nil {
		errs = append(errs, err)
	}
	if _, err := parseLogLevel(o.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if (o.ClientCert == "") != (o.ClientKey == "") {
		errs = append(errs, errors.New("--client-cert and --client-key must be given together"))
	}
	if u := o.MetricsPushgatewayURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("invalid --metrics-pushgateway-url %q: want an http or https URL", u))
		}
	}
	if u := o.PolicyServerURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("invalid --policy-server-url %q: want an http or https URL", u))
		}
	}
	if o.KubewardenNamespace == "" {
		errs = append(errs, errors.New("--kubewarden-namespace must not be empty"))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"--parallel-namespaces", o.ParallelNamespaces}, {"--parallel-resources", o.ParallelResources}, {"--parallel-policies", o.ParallelPolicies}, {"--page-size", o.PageSize}} {
		if p.v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1, not %d", p.name, p.v))
		}
	}
	return errors.Join(errs...)
}

// useOpenReports reports whether --report-kind asks for OpenReports.
func (o *Options) useOpenReports() (bool, error) {
	switch o.ReportKind {
	case ReportKindOpenReports, ReportKindOpenReport:
		return true, nil
	case ReportKindPolicyReport:
		return false, nil
	}
	return false, fmt.Errorf("invalid --report-kind %q: valid values are %s, %s and %s",
		o.ReportKind, ReportKindOpenReports, ReportKindOpenReport, ReportKindPolicyReport)
}

// parseLogLevel maps --loglevel (Kubewarden's debug, info, warning, error;
// warn and trace are accepted too) to observability's level names.
func parseLogLevel(level string) (string, error) {
	l := strings.ToLower(level)
	if l == "warning" {
		l = "warn"
	}
	if _, err := observability.ParseLevel(l); err != nil {
		return "", fmt.Errorf("invalid --loglevel %q: valid values are debug, info, warning, error", level)
	}
	return l, nil
}
