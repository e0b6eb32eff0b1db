//go:build cluster

package cluster_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
	"github.com/wardenhq/warden/internal/policybuild"
	"github.com/wardenhq/warden/internal/sharedcache"
)

// TestSharedPolicyCache runs two replicas on one shared policy cache (a
// PersistentVolumeClaim): the leader compiles a module into it, signed,
// and the other replica loads the code from it instead of compiling; a
// tampered blob is refused by the replica that finds it, and rebuilt; the
// replicas of a rolling update start from the cached code; the code of a
// deleted policy's module is removed.
func TestSharedPolicyCache(t *testing.T) {
	ctx := t.Context()
	cl, runner := startLifecycle(t, nil)
	c := cl.Client
	mustCreate(t, c, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "compiled-policies"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	})
	mustCreate(t, c, &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: policiesv1.PolicyServerSpec{Image: "ghcr.io/wardenhq/warden-policy-server:test", Replicas: 2,
			PolicyCache: &policiesv1.PolicyCache{ClaimName: "compiled-policies"}},
	})
	shared := runner.claimDir("compiled-policies")

	policy := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-privileged"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Rules: podCreateRules(),
			Module: "file://" + policybuild.ForTest(t, "../../examples/policies/pod-privileged"),
		}},
	}
	mustCreate(t, c, policy)
	waitServedGeneration(t, c, policy, 1)
	assertReplicaConditions(t, c, policy, 2)
	assertPrivilegedDenied(t, c)

	// One blob and its signature, under the module's digest, which the
	// revision names.
	store := openSharedCache(t, c, shared)
	digests := cachedModules(t, store)
	if len(digests) != 1 {
		t.Fatalf("the shared cache holds the code of %d modules, want 1: %v", len(digests), digests)
	}
	digest := digests[0]
	if got := revisionDigests(t, c, policy.Name); !slices.Equal(got, []string{"sha256:" + digest}) {
		t.Errorf("the revision's moduleDigests = %v, want [sha256:%s]", got, digest)
	}
	assertOnlySignedBlobs(t, shared)

	// Exactly one replica compiled the module (the leader, storing it);
	// the other copied the code from the shared cache.
	compiledBy, copiedBy := -1, -1
	for ord := range 2 {
		out := runner.output(ord)
		if strings.Contains(out, "compiled module stored in the shared cache") {
			compiledBy = ord
		}
		if strings.Contains(out, "compiled module copied from the shared cache") {
			copiedBy = ord
		}
	}
	if compiledBy < 0 || copiedBy < 0 || compiledBy == copiedBy {
		t.Fatalf("replica %d stored the module and replica %d copied it; want one of each", compiledBy, copiedBy)
	}

	// A blob tampered with on the volume is refused by the replica that
	// loads it next, which compiles the module and stores good code.
	blob := blobPath(t, store, digest)
	good, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(good)
	tampered[len(tampered)/2] ^= 0xff
	if err := os.WriteFile(blob, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	runner.kill(copiedBy)
	eventually(t, "the restarted replica refuses the tampered blob", func() bool {
		return strings.Contains(runner.output(copiedBy), "a compiled module in the shared cache is refused")
	})
	eventually(t, "the restarted replica is ready again", func() bool {
		return runner.restarts(copiedBy) == 1 && runner.readyReplicas() == 2
	})
	eventually(t, "the blob is rebuilt", func() bool {
		data, err := os.ReadFile(blob)
		return err == nil && !bytes.Equal(data, tampered)
	})
	if blobs, errs := store.Get(digest); len(blobs) != 1 || len(errs) != 0 {
		t.Fatalf("the rebuilt blob: %d verify, errors %v", len(blobs), errs)
	}
	assertPrivilegedDenied(t, c)

	// A rolling update (a new pod template): each new replica starts with
	// the served generation, from the signed code in the cache.
	seen := []int{len(runner.output(0)), len(runner.output(1))}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ps := get(t, c, &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		ps.Spec.Env = append(ps.Spec.Env, corev1.EnvVar{Name: "WARDEN_TEST_ROLL", Value: "1"})
		return c.Update(ctx, ps)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both replicas run the new template and are ready", func() bool {
		for ord := range 2 {
			if !strings.Contains(runner.output(ord)[seen[ord]:], "--- starting") {
				return false
			}
		}
		return runner.readyReplicas() == 2
	})
	for ord := range 2 {
		out := runner.output(ord)[seen[ord]:]
		if !strings.Contains(out, "compiled module copied from the shared cache") || strings.Contains(out, "compiled module stored in the shared cache") {
			t.Errorf("replica %d after the rolling update did not load the cached code:\n%s", ord, out)
		}
	}
	assertReplicaConditions(t, c, policy, 2)
	assertPrivilegedDenied(t, c)

	// A second policy's module goes into the cache, and out of it once the
	// policy (so its revisions) is deleted.
	other := &policiesv1.ClusterAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "labels"},
		Spec: policiesv1.ClusterAdmissionPolicySpec{PolicySpec: policiesv1.PolicySpec{
			PolicyServer: "default", Rules: podCreateRules(),
			Module:   "file://" + policybuild.ForTest(t, "labels"),
			Settings: runtime.RawExtension{Raw: []byte(`{"denied_labels":["forbidden"]}`)},
		}},
	}
	mustCreate(t, c, other)
	waitServedGeneration(t, c, other, 1)
	if got := cachedModules(t, store); len(got) != 2 {
		t.Fatalf("with two policies the shared cache holds %d modules, want 2", len(got))
	}
	if err := c.Delete(ctx, get(t, c, other)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted policy's module leaves the shared cache", func() bool {
		got := cachedModules(t, store)
		return len(got) == 1 && got[0] == digest
	})
	assertOnlySignedBlobs(t, shared)
}

// openSharedCache opens the shared cache in dir with the policy server's
// own signing files, read from its Secret, and the one Warden version
// directory the replicas made.
func openSharedCache(t *testing.T, c client.Client, dir string) *sharedcache.Store {
	t.Helper()
	secret := get(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: "policy-server-default"}})
	files := t.TempDir()
	paths := map[string]string{}
	for _, key := range []string{"cache-signing.crt", "cache-signing.key", "ca.crt"} {
		if len(secret.Data[key]) == 0 {
			t.Fatalf("the policy server's Secret has no %s", key)
		}
		paths[key] = filepath.Join(files, key)
		if err := os.WriteFile(paths[key], secret.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	versions, err := os.ReadDir(dir)
	if err != nil || len(versions) != 1 {
		t.Fatalf("the shared cache %s holds %d version directories (%v), want 1", dir, len(versions), err)
	}
	store, err := sharedcache.Open(sharedcache.Options{Dir: dir, Version: versions[0].Name(),
		CertFile: paths["cache-signing.crt"], KeyFile: paths["cache-signing.key"], CAFile: paths["ca.crt"]})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// cachedModules lists the digests of the modules whose code is cached.
func cachedModules(t *testing.T, store *sharedcache.Store) []string {
	t.Helper()
	entries, err := os.ReadDir(store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, e := range entries {
		digests = append(digests, e.Name())
	}
	return digests
}

// blobPath is the one blob of the module with digest.
func blobPath(t *testing.T, store *sharedcache.Store, digest string) string {
	t.Helper()
	var blobs []string
	_ = filepath.WalkDir(filepath.Join(store.Dir(), digest), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, ".sig") {
			blobs = append(blobs, path)
		}
		return err
	})
	if len(blobs) != 1 {
		t.Fatalf("module %s has %d blobs, want 1", digest, len(blobs))
	}
	return blobs[0]
}

// assertOnlySignedBlobs checks that every file under dir is a blob with its
// signature beside it, or that signature.
func assertOnlySignedBlobs(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		pair := path + ".sig"
		if strings.HasSuffix(path, ".sig") {
			pair = strings.TrimSuffix(path, ".sig")
		}
		if _, err := os.Stat(pair); err != nil {
			t.Errorf("%s has no pair on the shared cache: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// revisionDigests is the moduleDigests of the revision of the cluster-wide
// policy called name.
func revisionDigests(t *testing.T, c client.Client, name string) []string {
	t.Helper()
	var list policiesv1.PolicyRevisionList
	if err := c.List(t.Context(), &list, client.InNamespace(wardenNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, rev := range list.Items {
		if rev.Spec.ObjectReference.Name == name {
			return rev.Status.ModuleDigests
		}
	}
	t.Fatalf("no revision of %s", name)
	return nil
}

// assertPrivilegedDenied checks the API server refuses a privileged pod and
// admits a plain one.
func assertPrivilegedDenied(t *testing.T, c client.Client) {
	t.Helper()
	if err := c.Create(t.Context(), pod("default", "privileged", true), client.DryRunAll); err == nil ||
		!strings.Contains(err.Error(), "Privileged container is not allowed") {
		t.Fatalf("a privileged pod: %v, want it denied", err)
	}
	if err := c.Create(t.Context(), pod("default", "plain", false), client.DryRunAll); err != nil {
		t.Fatalf("a plain pod: %v", err)
	}
}
