package engine

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// TestEqualSeesEveryField: hot reload rebuilds a policy when
// PolicyConfig.equal says its configuration changed. equal compares the
// JSON form and, by hand, the fields JSON leaves out (`json:"-"`), so a new
// such field would silently never trigger a reload. This test changes every
// field of a PolicyConfig, one at a time and at every depth (group members,
// context-aware resources), found by reflection, and fails for a change
// equal does not see.
func TestEqualSeesEveryField(t *testing.T) {
	missed, err := unseenChanges((*PolicyConfig).equal)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range missed {
		t.Errorf("PolicyConfig.equal does not see a change of %s: compare it there, or a reload will not follow its changes", path)
	}
}

// TestUnseenChangesFindsAnOmission: the check above fails for a comparison
// that leaves a field out, and for one that tells equal configurations
// apart.
func TestUnseenChangesFindsAnOmission(t *testing.T) {
	ignoringName := func(c, o *PolicyConfig) bool {
		withName := *o
		withName.Name = c.Name
		return c.equal(&withName)
	}
	ignoringMemberTimeouts := func(c, o *PolicyConfig) bool {
		members := map[string]*GroupMember{}
		for k, m := range o.Policies {
			if m == nil {
				members[k] = nil
				continue
			}
			mm := *m
			if cm := c.Policies[k]; cm != nil {
				mm.TimeoutEvalSeconds = cm.TimeoutEvalSeconds
			}
			members[k] = &mm
		}
		oo := *o
		oo.Policies = members
		return c.equal(&oo)
	}
	tests := []struct {
		name    string
		eq      func(c, o *PolicyConfig) bool
		want    []string
		wantErr bool
	}{
		{name: "Name left out", eq: ignoringName, want: []string{"PolicyConfig.Name"}},
		{name: "a member's timeout left out", eq: ignoringMemberTimeouts,
			want: []string{"PolicyConfig.Policies[a].TimeoutEvalSeconds = nil", "PolicyConfig.Policies[a].TimeoutEvalSeconds"}},
		{name: "never equal", eq: func(c, o *PolicyConfig) bool { return false }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missed, err := unseenChanges(tt.eq)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %t", err, tt.wantErr)
			}
			if !slices.Equal(missed, tt.want) {
				t.Errorf("unseen %q, want %q", missed, tt.want)
			}
		})
	}
}

// unseenChanges returns the paths of the changes of one field of a
// PolicyConfig that eq does not see. It fills every field of a
// PolicyConfig, and of what it holds, with a value that is not the zero
// value (maps and slices with one element), then makes one variant per
// value found: a scalar changed, a pointer, map or slice emptied, a map key
// renamed. It fails when eq tells two copies of the same configuration
// apart, or when a field cannot be filled.
func unseenChanges(eq func(c, o *PolicyConfig) bool) ([]string, error) {
	build := func(variant int) (*PolicyConfig, []string, error) {
		f := &filler{variant: variant}
		v := reflect.New(reflect.TypeFor[PolicyConfig]())
		f.fill(v.Elem(), "PolicyConfig")
		return v.Interface().(*PolicyConfig), f.paths, f.err
	}
	base, paths, err := build(-1)
	if err != nil {
		return nil, err
	}
	if again, _, _ := build(-1); !eq(base, again) {
		return nil, fmt.Errorf("two copies of the same configuration are not equal")
	}
	var missed []string
	for i, path := range paths {
		changed, _, err := build(i)
		if err != nil {
			return nil, err
		}
		if eq(base, changed) {
			missed = append(missed, path)
		}
	}
	return missed, nil
}

// filler fills a value by reflection, numbering the values it can vary in
// the order it meets them; the one numbered variant gets its variant.
type filler struct {
	variant int
	paths   []string // of the values that can vary, by number
	err     error
}

// next numbers a value that can vary and tells whether it is the variant.
func (f *filler) next(path string) bool {
	f.paths = append(f.paths, path)
	return len(f.paths)-1 == f.variant
}

func (f *filler) fill(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(map[bool]string{false: "a", true: "b"}[f.next(path)])
	case reflect.Bool:
		v.SetBool(!f.next(path))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(map[bool]int64{false: 1, true: 2}[f.next(path)])
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage: valid JSON
			v.SetBytes([]byte(map[bool]string{false: "1", true: "2"}[f.next(path)]))
			return
		}
		if f.next(path + " = nil") {
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		f.fill(s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Map:
		if f.next(path + " = nil") {
			return
		}
		key := map[bool]string{false: "a", true: "b"}[f.next(path+" key")]
		elem := reflect.New(v.Type().Elem()).Elem()
		f.fill(elem, path+"["+key+"]")
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
		v.Set(m)
	case reflect.Pointer:
		if f.next(path + " = nil") {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			field := v.Type().Field(i)
			if !field.IsExported() {
				f.setErr(fmt.Errorf("%s.%s is not exported: the test cannot change it", path, field.Name))
				continue
			}
			f.fill(v.Field(i), path+"."+field.Name)
		}
	default:
		f.setErr(fmt.Errorf("%s is a %s, which the test does not fill: add it", path, v.Kind()))
	}
}

func (f *filler) setErr(err error) {
	if f.err == nil {
		f.err = err
	}
}
