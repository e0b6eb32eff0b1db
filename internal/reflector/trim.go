package reflector

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/wardenhq/warden/internal/jsontape"
)

// trimmer writes objects as a table keeps them (Trimmed) from their JSON
// text, without decoding them into Go values: it walks a jsontape tape of
// the text and copies what it keeps. Trimming a page of a list therefore
// allocates about the bytes it writes, where decoding each object into
// maps and encoding it again allocated ten times the page (the 2,000 Pods
// of docs/benchmarks.md: 970 MB for a 68 MB list).
//
// What it writes is byte for byte what json.Marshal writes for the object
// decoded as client-go decodes an unstructured object (sigs.k8s.io/json,
// integers as int64, other numbers as float64), once trimmed: the members
// of every object in the order of their names, the last of a repeated
// key, strings and numbers as encoding/json writes them, no spaces.
// FuzzTrimmer holds it to that.
//
// A trimmer is used by one goroutine. The JSON of the objects it returns
// lives in its buffer until reset.
type trimmer struct {
	tape jsontape.Tape
	buf  []byte
	// members is a stack of the members of the objects being written,
	// sorted per object; an object's members sit above its parent's.
	members []member
	// name and namespace are the top-level object's metadata, as found.
	name, namespace string
	items           []int32 // scratch of page
}

// member is a member of an object: its key, decoded, and the node of the
// key on the tape (its value is the node after it), or, for a member the
// trimmer adds (a list item's apiVersion and kind), node -1 and the value.
type member struct {
	key   string
	node  int32
	added string
}

// trimLevel says what an object is to the trimming rules: the object
// itself, its metadata, the metadata's annotations, or anything else,
// which is copied whole.
type trimLevel int

const (
	levelOther trimLevel = iota
	levelObject
	levelMetadata
	levelAnnotations
)

// Members the trimming drops (Trim).
const (
	managedFieldsKey = "managedFields"
	lastAppliedKey   = "kubectl.kubernetes.io/last-applied-configuration"
)

// reset forgets the objects written so far; their JSON may be overwritten.
func (w *trimmer) reset() { w.buf = w.buf[:0] }

// trimmed parses raw, one object, and returns it as Trimmed does. Its JSON
// is valid until the next reset.
func (w *trimmer) trimmed(raw []byte, typ metav1.TypeMeta) (Object, error) {
	if !w.tape.Parse(string(raw)) {
		return Object{}, fmt.Errorf("reading an object: %w", jsonError(raw))
	}
	return w.object(0, typ)
}

// object writes the object at node i of the tape, trimmed, with typ's
// apiVersion and kind when it has none (a list's items), and returns it.
// Its JSON is valid until the next reset.
func (w *trimmer) object(i int32, typ metav1.TypeMeta) (Object, error) {
	switch w.tape.Nodes[i].Kind {
	case '{':
	case 'n':
		return Object{}, errors.New("reading an object: it is null")
	default:
		return Object{}, errors.New("reading an object: it is not a JSON object")
	}
	w.name, w.namespace = "", ""
	start := len(w.buf)
	if err := w.writeObject(i, levelObject, typ); err != nil {
		return Object{}, err
	}
	if w.name == "" {
		w.buf = w.buf[:start]
		return Object{}, errors.New("reading an object: it has no metadata.name")
	}
	return Object{Name: w.name, Namespace: w.namespace, JSON: w.buf[start:len(w.buf):len(w.buf)]}, nil
}

// value writes the value at node i of the tape.
func (w *trimmer) value(i int32, level trimLevel) error {
	d := &w.tape
	n := &d.Nodes[i]
	switch n.Kind {
	case '{':
		return w.writeObject(i, level, metav1.TypeMeta{})
	case '[':
		w.buf = append(w.buf, '[')
		for e := i + 1; e < n.Next; e = d.Nodes[e].Next {
			if e > i+1 {
				w.buf = append(w.buf, ',')
			}
			if err := w.value(e, levelOther); err != nil {
				return err
			}
		}
		w.buf = append(w.buf, ']')
	case '"':
		w.str(i)
	case '0':
		return w.number(d.Raw(i))
	default: // true, false, null
		w.buf = append(w.buf, d.Raw(i)...)
	}
	return nil
}

// writeObject writes the object at node i, its members sorted by key, the
// last of a repeated key kept, trimmed as level says; typ's apiVersion and
// kind are added to an object of levelObject that has none.
func (w *trimmer) writeObject(i int32, level trimLevel, typ metav1.TypeMeta) error {
	d := &w.tape
	base := len(w.members)
	defer func() { w.members = w.members[:base] }()
	for k := i + 1; k < d.Nodes[i].Next; k = d.Nodes[k+1].Next {
		w.members = append(w.members, member{key: d.Str(k), node: k})
	}
	if level == levelObject {
		for _, add := range [...]member{{key: "apiVersion", added: typ.APIVersion}, {key: "kind", added: typ.Kind}} {
			if add.added != "" && d.Member(i, add.key) < 0 {
				add.node = -1
				w.members = append(w.members, add)
			}
		}
	}
	end := len(w.members)
	slices.SortStableFunc(w.members[base:end], func(a, b member) int { return strings.Compare(a.key, b.key) })

	w.buf = append(w.buf, '{')
	first := true
	for j := base; j < end; j++ {
		// Values written below push their members above end and pop
		// them again, so w.members is read afresh by index.
		m := w.members[j]
		if j+1 < end && w.members[j+1].key == m.key {
			continue // a later member of the same key wins, as in a map
		}
		inner, drop := w.rule(level, m)
		if drop {
			continue
		}
		if !first {
			w.buf = append(w.buf, ',')
		}
		first = false
		w.appendString(m.key)
		w.buf = append(w.buf, ':')
		if m.node < 0 {
			w.appendString(m.added)
			continue
		}
		if err := w.value(m.node+1, inner); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

// rule applies the trimming rules to member m of an object of level: it
// returns the level of m's value, and drop for a member Trim drops. It
// notes the object's name and namespace on the way.
func (w *trimmer) rule(level trimLevel, m member) (inner trimLevel, drop bool) {
	if m.node < 0 {
		return levelOther, false
	}
	d := &w.tape
	v := m.node + 1
	isObject := d.Nodes[v].Kind == '{'
	switch level {
	case levelObject:
		if m.key == "metadata" && isObject {
			return levelMetadata, false
		}
	case levelMetadata:
		switch m.key {
		case managedFieldsKey:
			return levelOther, true
		case "annotations":
			if isObject {
				return levelAnnotations, false
			}
		case "name", "namespace":
			s := ""
			if d.Nodes[v].Kind == '"' {
				s = d.Str(v)
			}
			if m.key == "name" {
				w.name = s
			} else {
				w.namespace = s
			}
		}
	case levelAnnotations:
		return levelOther, m.key == lastAppliedKey
	}
	return levelOther, false
}

// str writes the string at node i as encoding/json writes its value.
func (w *trimmer) str(i int32) {
	d := &w.tape
	raw := d.Raw(i)
	if d.Nodes[i].Plain && marshalsAsIs(raw[1:len(raw)-1]) {
		w.buf = append(w.buf, raw...)
		return
	}
	w.appendString(d.Str(i))
}

// appendString writes s as encoding/json writes a string.
func (w *trimmer) appendString(s string) {
	if marshalsAsIs(s) && !strings.ContainsAny(s, `"\`) {
		w.buf = append(w.buf, '"')
		w.buf = append(w.buf, s...)
		w.buf = append(w.buf, '"')
		return
	}
	b, _ := json.Marshal(s) // a string always encodes
	w.buf = append(w.buf, b...)
}

// marshalsAsIs reports whether encoding/json writes s, the value of a
// string without quotes and backslashes, as it is: no control character,
// none of the characters it escapes for HTML, valid UTF-8 without U+2028
// and U+2029.
func marshalsAsIs(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '<' || c == '>' || c == '&' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}

// number writes the number s as json.Marshal writes what sigs.k8s.io/json
// decodes it to: an int64 when it has no fraction and fits, else a
// float64.
func (w *trimmer) number(s string) error {
	if !strings.Contains(s, ".") {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			w.buf = strconv.AppendInt(w.buf, v, 10)
			return nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("reading an object: number %s: %w", s, err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("reading an object: number %s: %w", s, err)
	}
	w.buf = append(w.buf, b...)
	return nil
}

// jsonError says why raw, which the tape would not parse, cannot be read,
// in encoding/json's words.
func jsonError(raw []byte) error {
	var v any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &v); err != nil {
		return err
	}
	return errors.New("it is not valid JSON")
}

// listPage is what a page of a list says besides its items, and where its
// items are on the trimmer's tape.
type listPage struct {
	itemType        metav1.TypeMeta // the items' apiVersion and kind
	resourceVersion string
	cont            string
	items           []int32
}

// page parses body, a page of a list, onto the tape. Its items are then
// trimmed with object.
func (w *trimmer) page(body string) (listPage, error) {
	d := &w.tape
	if !d.Parse(body) {
		return listPage{}, jsonError([]byte(body))
	}
	if d.Nodes[0].Kind != '{' {
		return listPage{}, errors.New("it is not a JSON object")
	}
	str := func(obj int32, key string) string {
		if v := d.Member(obj, key); v >= 0 && d.Nodes[v].Kind == '"' {
			return d.Str(v)
		}
		return ""
	}
	p := listPage{
		itemType: metav1.TypeMeta{APIVersion: str(0, "apiVersion"), Kind: strings.TrimSuffix(str(0, "kind"), "List")},
		items:    w.items[:0],
	}
	if md := d.Member(0, "metadata"); md >= 0 && d.Nodes[md].Kind == '{' {
		p.resourceVersion, p.cont = str(md, "resourceVersion"), str(md, "continue")
	}
	switch items := d.Member(0, "items"); {
	case items < 0 || d.Nodes[items].Kind == 'n':
	case d.Nodes[items].Kind == '[':
		for e := items + 1; e < d.Nodes[items].Next; e = d.Nodes[e].Next {
			p.items = append(p.items, e)
		}
	default:
		return listPage{}, errors.New("its items are not a list")
	}
	w.items = p.items
	return p, nil
}
