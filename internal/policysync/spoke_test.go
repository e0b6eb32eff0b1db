package policysync

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

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

// TestSetKubeconfigPokesOnNews: a spoke is kicked when its kubeconfig
// Secret says something new, and only then; the same unusable kubeconfig
// handed over again must not kick it, or it retries at once, reports, and
// is handed the same kubeconfig again, in a loop.
func TestSetKubeconfigPokesOnNews(t *testing.T) {
	s := newSpoke("fleet", "spoke-a", time.Minute, time.Second, slog.New(slog.DiscardHandler), func() {})
	kicked := func() bool {
		select {
		case <-s.kick:
			return true
		default:
			return false
		}
	}
	valid := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n")
	notRead := errors.New(`the kubeconfig Secret kubewarden/spoke-a has no key "other"`)
	for _, step := range []struct {
		what       string
		kubeconfig []byte
		readErr    error
		want       bool
	}{
		{"a first kubeconfig that does not parse", []byte("{garbage"), nil, true},
		{"the same again", []byte("{garbage"), nil, false},
		{"another one that does not parse", []byte("[garbage"), nil, true},
		{"a valid kubeconfig", valid, nil, true},
		{"the same valid kubeconfig", valid, nil, false},
		{"a Secret that cannot be read", nil, notRead, true},
		{"the same reason again", nil, errors.New(notRead.Error()), false},
		{"the valid kubeconfig back", valid, nil, true},
	} {
		s.setKubeconfig(step.kubeconfig, step.readErr)
		if got := kicked(); got != step.want {
			t.Errorf("%s: kicked %v, want %v", step.what, got, step.want)
		}
	}
}
