package celpolicy

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"github.com/wardenhq/warden/internal/jsontape"
)

// The fast decoder reads a request as CEL values with the meaning cel-policy
// gets from encoding/json decoding into any: objects are maps keyed by
// strings, arrays are lists, numbers are doubles. One pass over the text
// (jsontape) validates it and records every value on a tape; values are then
// read from the tape when an expression reaches them, and strings are slices
// of the text. Values belong to one evaluation and are not safe for
// concurrent use.

// document is a request's tape and the CEL values made from it. The tape
// is its own, parsed from the request's text, or the caller's, which
// parsed the text the request came in (the AdmissionReview).
type document struct {
	*jsontape.Tape
	own  jsontape.Tape // the tape parse builds, its buffer reused
	root int32         // the request's node
	// vals are the objects and arrays read so far, by node; set lists
	// their nodes. Every other entry up to cap(vals) is nil, so that
	// neither a request nor the next has to clear the whole (the tape's
	// length, where a few dozen are set).
	vals []ref.Val
	set  []int32

	// The objects, arrays and iterators of one evaluation, from buffers
	// reused by the next: values do not outlive the evaluation.
	objects   slab[jsonObject]
	arrays    slab[jsonArray]
	iterators slab[arrayIterator]
}

// parse builds the tape of text and forgets the values of the previous one.
func (d *document) parse(text string) bool {
	d.forget()
	d.Tape, d.root = &d.own, 0
	return d.Parse(text)
}

// use reads the request at node of t and forgets the values of the
// previous one.
func (d *document) use(t *jsontape.Tape, node int32) {
	d.forget()
	d.Tape, d.root = t, node
}

// forget drops the values read so far.
func (d *document) forget() {
	vals := d.vals[:cap(d.vals)]
	for _, i := range d.set {
		vals[i] = nil
	}
	d.vals, d.set = d.vals[:0], d.set[:0]
}

// release forgets the request and its values, keeping the buffers (up to
// maxNodes nodes).
func (d *document) release(maxNodes int) {
	d.forget()
	d.Tape, d.own.Text = nil, ""
	if cap(d.own.Nodes) > maxNodes || cap(d.vals) > maxNodes {
		d.own.Nodes, d.vals, d.set = nil, nil, nil
	}
	d.objects.reset(maxNodes)
	d.arrays.reset(maxNodes)
	d.iterators.reset(maxNodes)
}

// slab hands out zero values of T from a buffer that is reused once every
// value handed out is dropped (reset). When the buffer is full it allocates,
// and reset makes the next buffer large enough.
type slab[T any] struct {
	buf    []T
	missed int // values allocated since reset because buf was full
}

func (s *slab[T]) new() *T {
	if len(s.buf) == cap(s.buf) {
		s.missed++
		return new(T)
	}
	s.buf = s.buf[:len(s.buf)+1]
	return &s.buf[len(s.buf)-1]
}

// reset takes back every value handed out; the buffer keeps up to max.
func (s *slab[T]) reset(max int) {
	clear(s.buf)
	if n := len(s.buf) + s.missed; s.missed > 0 && n <= max {
		s.buf = make([]T, 0, n)
	} else {
		s.buf = s.buf[:0]
	}
	s.missed = 0
}

// value returns the value at node i. An object or array is made once, so
// that what it has decoded is kept.
func (d *document) value(i int32) ref.Val {
	n := &d.Nodes[i]
	switch n.Kind {
	case '{', '[':
		if len(d.vals) == 0 {
			d.vals = slices.Grow(d.vals, len(d.Nodes))[:len(d.Nodes)] // nil: see vals
		}
		if d.vals[i] == nil {
			d.set = append(d.set, i)
			if n.Kind == '{' {
				o := d.objects.new()
				o.d, o.i = d, i
				d.vals[i] = o
			} else {
				a := d.arrays.new()
				a.d, a.i = d, i
				d.vals[i] = a
			}
		}
		return d.vals[i]
	case '"':
		return types.String(d.Str(i))
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	}
	return types.Double(d.Number(i))
}

// jsonObject is a JSON object as a CEL map with string keys. Lookups, size
// and folds read the tape; the rest of the map behaviour comes from a cel-go
// map built on first need, so that it is cel-go's own. An object that
// repeats a key (the last one wins, as in encoding/json) is served by that
// map alone.
type jsonObject struct {
	d    *document
	i    int32
	base traits.Mapper
}

func (o *jsonObject) mapper() traits.Mapper {
	if o.base == nil {
		n := o.d.Nodes[o.i]
		m := make(map[ref.Val]ref.Val, n.Count)
		for k := o.i + 1; k < n.Next; k = o.d.Nodes[k+1].Next {
			m[types.String(o.d.Str(k))] = o.d.value(k + 1) // the last of a repeated key wins
		}
		o.base = types.NewRefValMap(types.DefaultTypeAdapter, m)
	}
	return o.base
}

// Find implements traits.Mapper.
func (o *jsonObject) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		if !o.d.Unique(o.i) {
			return o.mapper().Find(key)
		}
		return nil, false
	}
	// The last of a repeated key wins, as in the map.
	if v := o.d.LastMember(o.i, string(k)); v >= 0 {
		return o.d.value(v), true
	}
	return nil, false
}

// Get implements traits.Indexer.
func (o *jsonObject) Get(key ref.Val) ref.Val {
	v, found := o.Find(key)
	if !found {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container.
func (o *jsonObject) Contains(key ref.Val) ref.Val {
	_, found := o.Find(key)
	return types.Bool(found)
}

// Size implements traits.Sizer.
func (o *jsonObject) Size() ref.Val {
	if !o.d.Unique(o.i) {
		return o.mapper().Size()
	}
	return types.Int(o.d.Nodes[o.i].Count)
}

// Iterator implements traits.Iterable.
func (o *jsonObject) Iterator() traits.Iterator {
	if !o.d.Unique(o.i) {
		return o.mapper().Iterator()
	}
	n := o.d.Nodes[o.i]
	keys := make([]string, 0, n.Count)
	for k := o.i + 1; k < n.Next; k = o.d.Nodes[k+1].Next {
		keys = append(keys, o.d.Str(k))
	}
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}

// Fold implements traits.Foldable.
func (o *jsonObject) Fold(f traits.Folder) {
	if !o.d.Unique(o.i) {
		types.ToFoldableMap(o.mapper()).Fold(f)
		return
	}
	end := o.d.Nodes[o.i].Next
	for k := o.i + 1; k < end; k = o.d.Nodes[k+1].Next {
		if !f.FoldEntry(types.String(o.d.Str(k)), o.d.value(k+1)) {
			return
		}
	}
}

// ConvertToNative implements ref.Val.
func (o *jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.mapper().ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (o *jsonObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return o.mapper().ConvertToType(t)
}

// Equal implements ref.Val.
func (o *jsonObject) Equal(other ref.Val) ref.Val { return o.mapper().Equal(other) }

// Type implements ref.Val.
func (o *jsonObject) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (o *jsonObject) Value() any { return o.mapper().Value() }

// jsonArray is a JSON array as a CEL list: a cel-go list of its elements,
// built on first use.
type jsonArray struct {
	d    *document
	i    int32
	list traits.Lister
}

func (a *jsonArray) lister() traits.Lister {
	if a.list == nil {
		n := a.d.Nodes[a.i]
		elems := make([]ref.Val, 0, n.Count)
		for e := a.i + 1; e < n.Next; e = a.d.Nodes[e].Next {
			elems = append(elems, a.d.value(e))
		}
		a.list = types.NewRefValList(types.DefaultTypeAdapter, elems)
	}
	return a.list
}

// Add implements traits.Adder.
func (a *jsonArray) Add(other ref.Val) ref.Val { return a.lister().Add(other) }

// Contains implements traits.Container.
func (a *jsonArray) Contains(v ref.Val) ref.Val { return a.lister().Contains(v) }

// Get implements traits.Indexer.
func (a *jsonArray) Get(i ref.Val) ref.Val { return a.lister().Get(i) }

// Iterator implements traits.Iterable. It reads the tape, without the list.
func (a *jsonArray) Iterator() traits.Iterator {
	it := a.d.iterators.new()
	it.d, it.next, it.end = a.d, a.i+1, a.d.Nodes[a.i].Next
	return it
}

// Size implements traits.Sizer.
func (a *jsonArray) Size() ref.Val { return types.Int(a.d.Nodes[a.i].Count) }

// Fold implements traits.Foldable.
func (a *jsonArray) Fold(f traits.Folder) { types.ToFoldableList(a.lister()).Fold(f) }

// ConvertToNative implements ref.Val.
func (a *jsonArray) ConvertToNative(t reflect.Type) (any, error) {
	return a.lister().ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (a *jsonArray) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.ListType:
		return a
	case types.TypeType:
		return types.ListType
	}
	return a.lister().ConvertToType(t)
}

// Equal implements ref.Val.
func (a *jsonArray) Equal(other ref.Val) ref.Val { return a.lister().Equal(other) }

// Type implements ref.Val.
func (a *jsonArray) Type() ref.Type { return types.ListType }

// Value implements ref.Val.
func (a *jsonArray) Value() any { return a.lister().Value() }

// arrayIterator walks the elements of a JSON array on the tape.
type arrayIterator struct {
	d         *document
	next, end int32 // the node of the next element, the array's Next
}

// HasNext implements traits.Iterator.
func (it *arrayIterator) HasNext() ref.Val { return types.Bool(it.next < it.end) }

// Next implements traits.Iterator.
func (it *arrayIterator) Next() ref.Val {
	if it.next >= it.end {
		return nil
	}
	v := it.d.value(it.next)
	it.next = it.d.Nodes[it.next].Next
	return v
}

// ConvertToNative implements ref.Val.
func (it *arrayIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion on iterators not supported")
}

// ConvertToType implements ref.Val.
func (it *arrayIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("no such overload")
}

// Equal implements ref.Val.
func (it *arrayIterator) Equal(ref.Val) ref.Val { return types.NewErr("no such overload") }

// Type implements ref.Val.
func (it *arrayIterator) Type() ref.Type { return types.IteratorType }

// Value implements ref.Val.
func (it *arrayIterator) Value() any { return nil }
