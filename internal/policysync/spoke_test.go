package policysync

import (
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestIsUnreachable(t *testing.T) {
	gr := schema.GroupResource{Group: "policies.kubewarden.io", Resource: "clusteradmissionpolicies"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("Get \"https://127.0.0.1:1\": %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"unauthorized", apierrors.NewUnauthorized("bad token"), true},
		{"unavailable", apierrors.NewServiceUnavailable("etcd down"), true},
		{"not found", apierrors.NewNotFound(gr, "x"), false},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{"invalid", apierrors.NewBadRequest("no"), false},
		{"conflict", apierrors.NewConflict(gr, "x", errors.New("changed")), false},
		{"webhook failure", apierrors.NewInternalError(errors.New("failed calling webhook")), false},
	} {
		if got := isUnreachable(tc.err); got != tc.want {
			t.Errorf("%s: isUnreachable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIncludes(t *testing.T) {
	m := map[string]string{"a": "1", "b": "2"}
	if !includes(m, map[string]string{"a": "1"}) || !includes(m, nil) {
		t.Error("a subset is not included")
	}
	if includes(m, map[string]string{"a": "2"}) || includes(m, map[string]string{"c": "1"}) {
		t.Error("a different value or a missing key is included")
	}
}
