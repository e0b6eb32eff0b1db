package hostcap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Exchange is one recorded host call: a request and the answer it got.
type Exchange struct {
	Request Request
	// Failed tells a failed call (Error) from a successful one (Payload).
	Failed bool
	// Payload is the JSON response of a successful call.
	Payload []byte
	// Error is the message of a failed call, without the "Callback
	// evaluation failure: " the guest sees before it.
	Error string
}

// Session is a list of exchanges, in the order they happened: kwctl's host
// capabilities session file.
//
// The file is YAML, written as kwctl (serde_yaml) writes it: a sequence of
// {type: Exchange, request: <string>, response: {type: Success, payload:
// <string>} or {type: Error, message: <string>}}, where request is itself a
// YAML document, the request tagged with its variant:
//
//	# one exchange
//	- type: Exchange
//	  request: |
//	    !KubernetesGetResource
//	    api_version: v1
//	    kind: Namespace
//	    name: team-a
//	    namespace: null
//	    disable_cache: false
//	    field_masks: null
//	  response:
//	    type: Success
//	    payload: '{"apiVersion":"v1","kind":"Namespace",...}'
type Session struct {
	Exchanges []Exchange
}

// sessionEntry is one entry of a session file.
type sessionEntry struct {
	Type     string `yaml:"type"`
	Request  string `yaml:"request"`
	Response struct {
		Type    string  `yaml:"type"`
		Payload *string `yaml:"payload"`
		Message *string `yaml:"message"`
	} `yaml:"response"`
}

// LoadSession reads a session file; see ParseSession. Errors name the file.
func LoadSession(path string) (*Session, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the host capabilities session: %w", err)
	}
	s, err := ParseSession(data)
	if err != nil {
		return nil, fmt.Errorf("host capabilities session %s: %w", path, err)
	}
	return s, nil
}

// ParseSession parses a session file written by kwctl or by a Recorder.
// Fields a request lacks are absent (older kwctl versions do not write
// field_masks); unknown fields are ignored, as serde does.
func ParseSession(data []byte) (*Session, error) {
	var entries []sessionEntry
	if err := yaml.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("want a list of exchanges: %w", err)
	}
	s := &Session{Exchanges: make([]Exchange, 0, len(entries))}
	for i, e := range entries {
		if e.asksWhetherListsChanged() {
			continue
		}
		ex, err := e.exchange()
		if err != nil {
			return nil, fmt.Errorf("exchange %d: %w", i+1, err)
		}
		s.Exchanges = append(s.Exchanges, ex)
	}
	return s, nil
}

// asksWhetherListsChanged reports a HasKubernetesListResourceAllResultChangedSinceInstant
// exchange: Kubewarden's question to its reflectors before reusing a
// Gatekeeper inventory, which kwctl records. Warden lists afresh at every
// evaluation and never asks it, so such exchanges are skipped.
func (e *sessionEntry) asksWhetherListsChanged() bool {
	const variant = "HasKubernetesListResourceAllResultChangedSinceInstant"
	req := strings.TrimSpace(e.Request)
	return strings.HasPrefix(req, "!"+variant) || strings.HasPrefix(req, variant+":")
}

func (e *sessionEntry) exchange() (Exchange, error) {
	if e.Type != "" && e.Type != "Exchange" {
		return Exchange{}, fmt.Errorf("type %q, want Exchange", e.Type)
	}
	req, err := ParseRequest(e.Request)
	if err != nil {
		return Exchange{}, fmt.Errorf("request: %w", err)
	}
	ex := Exchange{Request: req}
	switch r := e.Response; r.Type {
	case "Success":
		if r.Payload == nil {
			return Exchange{}, errors.New("response: a Success needs a payload")
		}
		ex.Payload = []byte(*r.Payload)
	case "Error":
		if r.Message == nil {
			return Exchange{}, errors.New("response: an Error needs a message")
		}
		ex.Failed, ex.Error = true, *r.Message
	default:
		return Exchange{}, fmt.Errorf("response type %q, want Success or Error", r.Type)
	}
	return ex, nil
}

// Marshal writes the session in kwctl's format.
func (s *Session) Marshal() ([]byte, error) {
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i, ex := range s.Exchanges {
		req, err := MarshalRequest(ex.Request)
		if err != nil {
			return nil, fmt.Errorf("exchange %d: %w", i+1, err)
		}
		resp := mapping("type", str("Success"), "payload", str(string(ex.Payload)))
		if ex.Failed {
			resp = mapping("type", str("Error"), "message", str(ex.Error))
		} else if !utf8.Valid(ex.Payload) {
			return nil, fmt.Errorf("exchange %d: the response of %s is not UTF-8 text", i+1, ex.Request.Variant())
		}
		list.Content = append(list.Content, mapping("type", str("Exchange"), "request", str(string(req)), "response", resp))
	}
	return encodeYAML(list)
}

// WriteFile writes the session to path, replacing it.
func (s *Session) WriteFile(path string) error {
	data, err := s.Marshal()
	if err != nil {
		return fmt.Errorf("writing the host capabilities session %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing the host capabilities session: %w", err)
	}
	return nil
}

// MarshalRequest writes a request as kwctl records it: a YAML document, the
// request's fields in their order, tagged with its variant.
func MarshalRequest(r Request) ([]byte, error) {
	n, err := requestNode(r)
	if err != nil {
		return nil, err
	}
	return encodeYAML(n)
}

// ParseRequest reads a request written by MarshalRequest or by kwctl: a
// mapping tagged with its variant (!KubernetesGetResource), or, as serde
// also reads it, a mapping of the variant to its fields.
func ParseRequest(doc string) (Request, error) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		return nil, err
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, errors.New("empty request")
	}
	n := root.Content[0]
	variant := strings.TrimPrefix(n.Tag, "!")
	if n.Kind == yaml.MappingNode && (n.Tag == "" || n.Tag == "!!map") && len(n.Content) == 2 {
		variant, n = n.Content[0].Value, n.Content[1]
	}
	r, ok := newRequest(variant)
	if !ok {
		return nil, fmt.Errorf("unknown request %q (line %d)", variant, n.Line)
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping of its fields (line %d)", variant, n.Line)
	}
	if err := n.Decode(r); err != nil {
		return nil, fmt.Errorf("%s: %w", variant, err)
	}
	return normalize(deref(r)), nil
}

// String renders a request on one line, for messages: the variant and its
// fields in YAML flow style, long values shortened.
func String(r Request) string {
	n, err := requestNode(r)
	if err != nil {
		return r.Variant()
	}
	flow(n)
	b, err := encodeYAML(n)
	if err != nil {
		return r.Variant()
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 400 {
		s = s[:400] + "...}"
	}
	return s
}

func flow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flow(c)
	}
}

func encodeYAML(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	enc.CompactSeqIndent() // "key:\n- item", as serde_yaml writes sequences
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// requestNode builds the YAML of a request as serde_yaml writes Rust's enum
// variant: its fields in declaration order, options as null.
func requestNode(r Request) (*yaml.Node, error) {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("unsupported request %T", r)
	}
	n := valueNode(v)
	n.Tag = "!" + r.Variant()
	return n, nil
}

var bytesType = reflect.TypeFor[Bytes]()

func valueNode(v reflect.Value) *yaml.Node {
	switch {
	case v.Type() == bytesType:
		if v.IsNil() {
			return null()
		}
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, c := range v.Bytes() {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(c))})
		}
		return n
	}
	switch v.Kind() {
	case reflect.String:
		return str(v.String())
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case reflect.Pointer:
		if v.IsNil() {
			return null()
		}
		return valueNode(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return null()
		}
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			n.Content = append(n.Content, valueNode(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return null()
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys) // Rust's BTreeMap
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range keys {
			n.Content = append(n.Content, str(k), valueNode(v.MapIndex(reflect.ValueOf(k))))
		}
		return n
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			n.Content = append(n.Content, str(name), valueNode(v.Field(i)))
		}
		return n
	}
	return null()
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func null() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"} }

func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, str(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

// Recorder is a Handler that forwards every request to another Handler and
// keeps the exchange, as kwctl's --record-host-capabilities-interactions
// does. Safe for concurrent use when the next Handler is.
type Recorder struct {
	next      Handler
	mu        sync.Mutex
	exchanges []Exchange
}

// NewRecorder returns a Recorder in front of next.
func NewRecorder(next Handler) *Recorder { return &Recorder{next: next} }

// Handle implements Handler.
func (r *Recorder) Handle(ctx context.Context, req Request) ([]byte, error) {
	out, err := r.next.Handle(ctx, req)
	ex := Exchange{Request: req, Payload: bytes.Clone(out)}
	if err != nil {
		ex = Exchange{Request: req, Failed: true, Error: err.Error()}
	}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, ex)
	r.mu.Unlock()
	return out, err
}

// Session returns the exchanges recorded so far.
func (r *Recorder) Session() *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Session{Exchanges: slices.Clone(r.exchanges)}
}

// Replayer is a Handler that answers from a Session, without reaching
// anything, as kwctl's --replay-host-capabilities-interactions does.
//
// A request is answered by the first exchange with an equal request at or
// after the position of the previous answer, wrapping around to the start:
// a session replays in the order it was recorded (as kwctl replays it), a
// request asked again gets the next recorded answer, and a session replays
// again for each evaluation of a benchmark. A request that no exchange of
// the session has fails with an error that names it. Safe for concurrent
// use.
type Replayer struct {
	source string
	logger *slog.Logger

	mu        sync.Mutex
	exchanges []Exchange
	used      []bool
	next      int
}

// NewReplayer returns a Replayer of s; source names the session in errors
// (its file). logger (nil: none) is told of requests the session lacks.
func NewReplayer(s *Session, source string, logger *slog.Logger) *Replayer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Replayer{source: source, logger: logger, exchanges: s.Exchanges, used: make([]bool, len(s.Exchanges))}
}

// Handle implements Handler.
func (r *Replayer) Handle(ctx context.Context, req Request) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.exchanges)
	for i := range n {
		j := (r.next + i) % n
		ex := r.exchanges[j]
		if !reflect.DeepEqual(ex.Request, req) {
			continue
		}
		r.used[j], r.next = true, (j+1)%n
		if ex.Failed {
			return nil, errors.New(ex.Error)
		}
		return bytes.Clone(ex.Payload), nil
	}
	r.logger.WarnContext(ctx, "host capability request not in the replayed session",
		"session", r.source, "request", String(req))
	return nil, fmt.Errorf("replaying the host capabilities session %s: it has no recorded answer for %s", r.source, String(req))
}

// Unreplayed returns how many exchanges of the session have not answered
// any request yet.
func (r *Replayer) Unreplayed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, u := range r.used {
		if !u {
			n++
		}
	}
	return n
}
