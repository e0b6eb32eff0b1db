package policysync

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/jsonpath"

	syncv1alpha1 "github.com/wardenhq/warden/api/sync/v1alpha1"
)

// feedbackRule is one entry of a PolicySync's spec.statusFeedback, with
// its JSONPath parsed.
type feedbackRule struct {
	name string
	path *jsonpath.JSONPath
}

// compileFeedback parses the JSONPaths of rules. kubectl's syntax is
// accepted with or without the surrounding braces.
func compileFeedback(rules []syncv1alpha1.StatusFeedback) ([]feedbackRule, error) {
	out := make([]feedbackRule, 0, len(rules))
	for _, r := range rules {
		expr := strings.TrimSpace(r.JSONPath)
		if !strings.HasPrefix(expr, "{") {
			expr = "{" + expr + "}"
		}
		p := jsonpath.New(r.Name).AllowMissingKeys(true)
		if err := p.Parse(expr); err != nil {
			return nil, fmt.Errorf("statusFeedback %q: JSONPath %q: %w", r.Name, r.JSONPath, err)
		}
		out = append(out, feedbackRule{name: r.Name, path: p})
	}
	return out, nil
}

// readFeedback returns the value of each rule in obj: a string as it is,
// any other value as JSON, several matches as a JSON array. A rule that
// matches nothing is left out.
func readFeedback(rules []feedbackRule, obj *unstructured.Unstructured) map[string]string {
	if len(rules) == 0 || obj == nil {
		return nil
	}
	out := map[string]string{}
	for _, r := range rules {
		results, err := r.path.FindResults(obj.Object)
		if err != nil {
			continue
		}
		var values []any
		for _, rs := range results {
			for _, v := range rs {
				if v.IsValid() && v.CanInterface() {
					values = append(values, v.Interface())
				}
			}
		}
		switch len(values) {
		case 0:
			continue
		case 1:
			if s, ok := values[0].(string); ok {
				out[r.name] = s
				continue
			}
			out[r.name] = jsonString(values[0])
		default:
			out[r.name] = jsonString(values)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func jsonString(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}
