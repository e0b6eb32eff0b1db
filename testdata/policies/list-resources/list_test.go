package main

import "testing"

func TestCountItems(t *testing.T) {
	tests := []struct {
		name   string
		list   string
		want   int
		wantOK bool
	}{
		{name: "empty", list: `{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[]}`, want: 0, wantOK: true},
		{name: "two", list: `{"kind":"NamespaceList","items":[{"metadata":{"name":"a"}},{"kind":"Namespace","metadata":{"labels":{"x":"y"},"name":"b"}}]}`,
			want: 2, wantOK: true},
		{name: "items without a name count too", list: `{"items":[{"metadata":{"generateName":"a-"}},{"metadata":{"name":"b"}}]}`, want: 2, wantOK: true},
		{name: "escapes and brackets in strings", list: `{"items":[{"metadata":{"annotations":{"a":"}]\"{[\\"},"name":"x\"y"}}, {"metadata":{"name":"z"}} ]}`,
			want: 2, wantOK: true},
		{name: "white space", list: "{\"items\" : [ \n{\"metadata\":{\"name\":\"a\"}} ,\n\t{\"metadata\":{\"name\":\"b\"}}\n]}", want: 2, wantOK: true},
		{name: "no items", list: `{"kind":"Status"}`, wantOK: false},
		{name: "not objects", list: `{"items":[1,2]}`, wantOK: false},
		{name: "cut short", list: `{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b`, want: 0, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, ok := countItems([]byte(tt.list))
			if n != tt.want || ok != tt.wantOK {
				t.Errorf("countItems() = %d, %v, want %d, %v", n, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		name, settings string
		wantOp         string
		wantRequest    string
		wantMsg        string
	}{
		{name: "all", settings: `{"call":"all","api_version":"v1","kind":"Namespace","scan":true,"min_items":3}`,
			wantOp: "list_resources_all", wantRequest: `{"api_version":"v1","kind":"Namespace"}`},
		{name: "namespace", settings: `{"call":"namespace","namespace":"team-a","api_version":"v1","kind":"Pod"}`,
			wantOp: "list_resources_by_namespace", wantRequest: `{"api_version":"v1","kind":"Pod","namespace":"team-a"}`},
		{name: "namespace missing", settings: `{"call":"namespace","api_version":"v1","kind":"Pod"}`, wantMsg: "call: namespace needs a namespace"},
		{name: "no kind", settings: `{"call":"all","api_version":"v1"}`, wantMsg: "api_version and kind are required"},
		{name: "bad call", settings: `{"call":"some","api_version":"v1","kind":"Pod"}`, wantMsg: `call must be all or namespace, not "some"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, msg := parseSettings([]byte(tt.settings))
			if msg != tt.wantMsg {
				t.Fatalf("parseSettings() message = %q, want %q", msg, tt.wantMsg)
			}
			if msg == "" && (s.operation != tt.wantOp || string(s.request) != tt.wantRequest) {
				t.Errorf("parseSettings() = %s %s, want %s %s", s.operation, s.request, tt.wantOp, tt.wantRequest)
			}
		})
	}
}
