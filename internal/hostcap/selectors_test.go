package hostcap

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSelectObjects(t *testing.T) {
	objects := []json.RawMessage{
		json.RawMessage(`{"metadata":{"name":"a","namespace":"x","labels":{"app":"web","tier":"front"}},"spec":{"nodeName":"node-1","replicas":2},"status":{"phase":"Running"}}`),
		json.RawMessage(`{"metadata":{"name":"b","namespace":"x","labels":{"app":"db"}},"spec":{"replicas":1},"status":{"phase":"Pending"}}`),
		json.RawMessage(`{"metadata":{"name":"c","namespace":"y"},"spec":{"nodeName":"node-2"},"status":{"phase":"Running"}}`),
	}
	tests := []struct {
		name          string
		labels, field *string
		masks         []string
		want          string // names, or an error's start
	}{
		{name: "everything", want: "a b c"},
		{name: "label equality", labels: new("app=web"), want: "a"},
		{name: "label set", labels: new("app in (web,db),tier!=front"), want: "b"},
		{name: "label existence", labels: new("!app"), want: "c"},
		{name: "a field of the spec", field: new("spec.nodeName=node-2"), want: "c"},
		{name: "a missing field is empty", field: new("spec.nodeName="), want: "b"},
		{name: "fields together", field: new("status.phase=Running,metadata.namespace!=y"), want: "a"},
		{name: "a number", field: new("spec.replicas=2"), want: "a"},
		{name: "labels and fields", labels: new("app"), field: new("status.phase!=Running"), want: "b"},
		{name: "masks", masks: []string{"status.phase"}, want: "a b c"},
		{name: "a bad label selector", labels: new("app in ("), want: `invalid label selector "app in ("`},
		{name: "a bad field selector", field: new("spec.nodeName"), want: `invalid field selector "spec.nodeName"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := selectObjects(objects, tt.labels, tt.field, newMask(tt.masks))
			if err != nil {
				if !strings.HasPrefix(err.Error(), tt.want) {
					t.Errorf("error %v, want %q", err, tt.want)
				}
				return
			}
			b, _ := json.Marshal(items)
			var got []struct {
				Metadata struct{ Name string } `json:"metadata"`
				Spec     map[string]any        `json:"spec"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range got {
				names = append(names, o.Metadata.Name)
				if tt.masks != nil && o.Spec != nil {
					t.Errorf("%s keeps its spec under masks %v", o.Metadata.Name, tt.masks)
				}
			}
			if strings.Join(names, " ") != tt.want {
				t.Errorf("got %v, want %s", names, tt.want)
			}
		})
	}
}
