package dashboards

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The files under test, relative to this package's directory.
var (
	dashboardFile = filepath.Join("..", "..", "charts", "warden", "files", "dashboards", "warden.json")
	rulesFile     = filepath.Join("..", "..", "charts", "warden", "files", "alerts", "warden.rules.yaml")
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	// Panels are those of a collapsed row.
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Expr  string `json:"expr"`
	RefID string `json:"refId"`
}

type variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Query is the variable's query, a string or {"query": ...}.
	Query json.RawMessage `json:"query"`
}

// query is one PromQL query of the dashboard, named for the messages.
type query struct {
	name string
	expr string
}

// variableValues are the values the tests give the dashboard's variables:
// Grafana's built-in intervals for a 15-second scrape interval and a range
// of one hour, the policy server the test runs, and "All" (the variables'
// allValue) for the others.
var variableValues = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "15s",
	"__range":         "1h",
	"policy_server":   "default",
	"policy":          ".*",
	"controller":      ".*",
}

var variableRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// substitute replaces the variables in expr as Grafana does before it sends
// the query, failing on a variable the tests do not know.
func substitute(t *testing.T, expr string) string {
	t.Helper()
	return variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2]
		v, ok := variableValues[name]
		if !ok {
			t.Errorf("%q: unknown variable $%s", expr, name)
		}
		return v
	})
}

var labelValuesRef = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// loadDashboard reads the dashboard and returns its panel queries and its
// variables' queries, as PromQL: label_values(selector, label), Grafana's
// own function, becomes count by (label) (selector).
func loadDashboard(t *testing.T) (panels, variables []query) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d is used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %v, want the dashboard's ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				panels = append(panels, query{name: p.Title + "/" + tg.RefID, expr: substitute(t, tg.Expr)})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			q = obj.Query
		}
		m := labelValuesRef.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		variables = append(variables, query{name: "variable " + v.Name, expr: "count by (" + m[2] + ") (" + substitute(t, m[1]) + ")"})
	}
	return panels, variables
}

// loadRules reads the alert rules, checked as Prometheus checks a rule
// file when it loads it.
func loadRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// Every query of the dashboard and every alert parses, and names only
// metrics Warden exports. TestQueriesReturnData (build tag cluster)
// evaluates them.
func TestQueriesParse(t *testing.T) {
	panels, variables := loadDashboard(t)
	rules := loadRules(t)
	if len(panels) == 0 || len(rules) == 0 {
		t.Fatalf("%d panel queries, %d alerts", len(panels), len(rules))
	}
	p := parser.NewParser(parser.Options{})
	all := append(panels, variables...)
	for _, r := range rules {
		all = append(all, query{name: "alert " + r.Alert, expr: r.Expr})
	}
	for _, q := range all {
		expr, err := p.ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.name, err, q.expr)
			continue
		}
		for _, name := range metricNames(expr) {
			if !slices.ContainsFunc(exportedMetrics, func(prefix string) bool { return strings.HasPrefix(name, prefix) }) {
				t.Errorf("%s: metric %s is not one Warden exports", q.name, name)
			}
		}
	}
}

// exportedMetrics are the metrics the queries may read, or their prefixes:
// the policy server's (internal/observability/metrics.go), the
// controller's (internal/controller/metrics.go, and controller-runtime's
// process, Go and reconcile metrics), and Prometheus's up.
var exportedMetrics = []string{
	"kubewarden_policy_evaluations_total",
	"kubewarden_policy_evaluation_latency_milliseconds_bucket",
	"kubewarden_policy_evaluation_latency_milliseconds_sum",
	"kubewarden_policy_evaluation_latency_milliseconds_count",
	"warden_policy_reload_total",
	"warden_policy_evaluation_timeouts_total",
	"warden_policy_server_refused_requests_total",
	"warden_reflector_synced",
	"warden_reflector_lists_total",
	"warden_reflector_last_list_timestamp_seconds",
	"warden_policy_generation",
	"kubewarden_policy_total",
	"controller_runtime_",
	"process_",
	"go_",
	"up",
}

// metricNames returns the metric names expr selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}
