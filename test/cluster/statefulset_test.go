//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wardenhq/warden/internal/logtest"
	"github.com/wardenhq/warden/internal/policybuild"
)

// podRunner stands in for the StatefulSet controller and the kubelet, which
// the test cluster lacks: it runs each replica of a PolicyServer's
// StatefulSet as a local policy-server process, rolls them when the pod
// template changes, restarts those that crash, keeps their mounted Secrets
// and ConfigMaps current, and keeps a Pod object per replica whose Ready
// condition follows the process's readiness probe.
//
// run is the only writer of the replica map and of a replica's process
// fields; kill, restarts, readyReplicas and readyPorts may be called from
// any goroutine.
type podRunner struct {
	t           *testing.T
	c           client.Client
	kubeconfig  string
	statefulSet string // policy-server-<name>, in wardenNamespace
	binary      string
	dir         string
	stopped     context.Context // cancelled at cleanup, ends run
	loops       sync.WaitGroup  // the run calls under way

	mu       sync.Mutex
	closed   bool
	replicas map[int]*replicaProc
}

// replicaProc is one ordinal of the StatefulSet: what outlives its
// processes (the webhook port the proxy dials, the output, the exits) and
// the process running now, if any.
type replicaProc struct {
	ordinal int
	port    int
	logs    logtest.Buffer

	// Guarded by podRunner.mu.
	ready   bool
	exits   int
	process *os.Process

	// Owned by run.
	tmpl      *corev1.PodTemplateSpec // what the process runs, kept for a restart after a crash
	hash      string
	exited    chan struct{}      // closed once the process has exited; nil when none runs
	probing   chan struct{}      // closed once the readiness probe has returned
	cancel    context.CancelFunc // ends the readiness probe
	mounts    []mountedVolume
	restartAt time.Time // the crash backoff
	lastErr   string    // the last start failure logged, so a waiting replica logs once
}

// mountedVolume is a Secret or ConfigMap volume of a running replica.
type mountedVolume struct {
	volume  corev1.Volume
	dir     string
	version string // the resourceVersion the files show
}

// objectData is a Secret's or ConfigMap's content; objectCache holds those
// read in one pass of run, so replicas mounting the same object cost one read.
type objectData struct {
	version string
	data    map[string][]byte
}
type objectCache map[string]objectData

// newPodRunner builds the policy server and returns a runner for the
// StatefulSet of PolicyServer policyServer; its processes reach the API
// server through kubeconfig. Every process is stopped when the test ends,
// and their output logged if it failed.
func newPodRunner(t *testing.T, c client.Client, kubeconfig, policyServer string) *podRunner {
	t.Helper()
	dir := t.TempDir()
	root := policybuild.RepoRootForTest(t)
	binary := filepath.Join(dir, "policy-server")
	build := exec.Command("go", "build", "-o", binary, "./cmd/policy-server")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the policy server: %v\n%s", err, out)
	}
	stopped, stop := context.WithCancel(context.Background())
	r := &podRunner{
		t: t, c: c, kubeconfig: kubeconfig, statefulSet: "policy-server-" + policyServer,
		binary: binary, dir: dir, stopped: stopped, replicas: map[int]*replicaProc{},
	}
	t.Cleanup(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		stop()
		r.loops.Wait()
		for _, ord := range slices.Sorted(maps.Keys(r.replicas)) {
			r.stop(r.replicas[ord], false)
			if t.Failed() {
				t.Logf("%s output:\n%s", r.podName(ord), r.replicas[ord].logs.String())
			}
		}
	})
	return r
}

// run reconciles the replicas with the StatefulSet every 100 ms until ctx
// is done or the test ends. Call it once, in its own goroutine.
func (r *podRunner) run(ctx context.Context) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.loops.Add(1)
	r.mu.Unlock()
	defer r.loops.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAfter := context.AfterFunc(r.stopped, cancel)
	defer stopAfter()
	for {
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.t.Logf("pod runner: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sync is one pass of run. Like a StatefulSet with parallel pod management,
// it starts missing replicas together and removes surplus ones together,
// but rolls a new template one replica at a time, from the highest ordinal
// down, once every replica is ready.
func (r *podRunner) sync(ctx context.Context) error {
	var sts appsv1.StatefulSet
	err := r.c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: r.statefulSet}, &sts)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	n := 0 // a deleted StatefulSet takes its pods with it
	if err == nil {
		n = int(ptr.Deref(sts.Spec.Replicas, 1))
	}
	for ord, p := range r.replicas {
		if ord >= n && p.tmpl != nil {
			r.stop(p, true)
			r.deletePod(ctx, r.podName(ord))
		}
	}
	if n == 0 {
		return nil
	}
	hash := templateHash(&sts.Spec.Template)
	cache := objectCache{}
	allReady := true
	for ord := range n {
		p, err := r.replica(ord)
		if err != nil {
			return err
		}
		r.reap(ctx, p)
		switch {
		case p.exited != nil:
			r.refreshMounts(ctx, p, cache)
		case time.Now().After(p.restartAt):
			tmpl, h := &sts.Spec.Template, hash
			if p.tmpl != nil {
				tmpl, h = p.tmpl, p.hash // the kubelet restarts the container of the same pod
			}
			r.start(ctx, &sts, p, tmpl, h, cache)
		}
		allReady = allReady && r.isReady(p)
	}
	if !allReady {
		return nil
	}
	for ord := n - 1; ord >= 0; ord-- {
		if p := r.replicas[ord]; p.hash != hash {
			r.stop(p, true)
			r.deletePod(ctx, r.podName(ord))
			r.start(ctx, &sts, p, &sts.Spec.Template, hash, cache)
			return nil
		}
	}
	return nil
}

// replica returns ordinal ord's replica, made the first time with the
// webhook port it keeps across restarts.
func (r *podRunner) replica(ord int) (*replicaProc, error) {
	if p, ok := r.replicas[ord]; ok {
		return p, nil
	}
	port, err := unusedPort()
	if err != nil {
		return nil, err
	}
	p := &replicaProc{ordinal: ord, port: port}
	r.mu.Lock()
	r.replicas[ord] = p
	r.mu.Unlock()
	return p, nil
}

// start starts p's process running tmpl, and its readiness probe. A start
// that cannot happen yet (a mounted object is missing) is logged once and
// tried again on the next pass.
func (r *podRunner) start(ctx context.Context, sts *appsv1.StatefulSet, p *replicaProc, tmpl *corev1.PodTemplateSpec, hash string, cache objectCache) {
	podName := r.podName(p.ordinal)
	cmd, readiness, err := r.command(ctx, p, tmpl, podName, cache)
	if err == nil {
		cmd.Stdout, cmd.Stderr = &p.logs, &p.logs
		fmt.Fprintf(&p.logs, "--- starting %s, template %s\n", podName, hash)
		err = cmd.Start()
	}
	if err != nil {
		if err.Error() != p.lastErr {
			r.t.Logf("pod runner: starting %s: %v", podName, err)
			p.lastErr = err.Error()
		}
		return
	}
	p.tmpl, p.hash, p.lastErr = tmpl, hash, ""
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(&p.logs, "--- %s exited: %v\n", podName, err)
		close(exited)
	}()
	probeCtx, cancel := context.WithCancel(ctx)
	p.exited, p.probing, p.cancel = exited, make(chan struct{}), cancel
	r.mu.Lock()
	p.process = cmd.Process
	r.mu.Unlock()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: wardenNamespace, Name: podName,
			Labels: maps.Clone(tmpl.Labels), Annotations: maps.Clone(tmpl.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	url := "" // without a probe, the replica is ready once started
	if probe := tmpl.Spec.Containers[0].ReadinessProbe; probe != nil && probe.HTTPGet != nil {
		url = fmt.Sprintf("http://127.0.0.1:%d%s", readiness, probe.HTTPGet.Path)
	}
	go r.probe(probeCtx, p, exited, pod, url)
}

// command is the process for the first container of tmpl, with its
// volumes set up in local directories, and the readiness port it listens on.
func (r *podRunner) command(ctx context.Context, p *replicaProc, tmpl *corev1.PodTemplateSpec, podName string, cache objectCache) (*exec.Cmd, int, error) {
	if len(tmpl.Spec.Containers) == 0 {
		return nil, 0, errors.New("the template has no container")
	}
	container := tmpl.Spec.Containers[0]
	paths := map[string]string{} // mount path -> local directory
	p.mounts = nil
	for _, m := range container.VolumeMounts {
		i := slices.IndexFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, 0, fmt.Errorf("volume %q is not in the template", m.Name)
		}
		v := tmpl.Spec.Volumes[i]
		dir := filepath.Join(r.dir, podName, v.Name)
		switch {
		case v.Secret != nil, v.ConfigMap != nil:
			d, err := r.objectData(ctx, cache, v)
			if err != nil {
				return nil, 0, err
			}
			if err := freshDir(dir); err != nil {
				return nil, 0, err
			}
			if err := writeVolume(dir, v, d.data); err != nil {
				return nil, 0, fmt.Errorf("volume %q: %w", v.Name, err)
			}
			p.mounts = append(p.mounts, mountedVolume{volume: v, dir: dir, version: d.version})
		case v.EmptyDir != nil:
			if err := freshDir(dir); err != nil {
				return nil, 0, err
			}
		case v.PersistentVolumeClaim != nil:
			// One directory per claim, shared by every replica, as one
			// ReadWriteMany volume would be.
			dir = r.claimDir(v.PersistentVolumeClaim.ClaimName)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, 0, err
			}
		default:
			return nil, 0, fmt.Errorf("volume %q: source not supported by the pod runner", v.Name)
		}
		paths[m.MountPath] = dir
	}

	readiness, err := unusedPort()
	if err != nil {
		return nil, 0, err
	}
	env := os.Environ()
	for _, e := range container.Env {
		value := e.Value
		if e.ValueFrom != nil {
			switch ref := e.ValueFrom.FieldRef; {
			case ref != nil && ref.FieldPath == "metadata.name":
				value = podName
			case ref != nil && ref.FieldPath == "metadata.namespace":
				value = wardenNamespace
			default:
				continue
			}
		}
		env = append(env, e.Name+"="+localPaths(value, paths))
	}
	// Later entries win: these place the replica on this machine.
	env = append(env,
		fmt.Sprintf("KUBEWARDEN_PORT=%d", p.port),
		fmt.Sprintf("KUBEWARDEN_READINESS_PROBE_PORT=%d", readiness),
		"KUBEWARDEN_BIND_ADDRESS=127.0.0.1",
		"KUBECONFIG="+r.kubeconfig)
	args := make([]string, len(container.Args))
	for i, a := range container.Args {
		args[i] = localPaths(a, paths)
	}
	cmd := exec.Command(r.binary, args...)
	cmd.Env = env
	return cmd, readiness, nil
}

// probe waits until the replica answers its readiness probe, then replaces
// its Pod with a ready one and only then lets the proxy reach it. A replica
// not ready within 2 minutes is killed, so it restarts as after a crash.
func (r *podRunner) probe(ctx context.Context, p *replicaProc, exited <-chan struct{}, pod *corev1.Pod, url string) {
	defer close(p.probing)
	httpClient := &http.Client{Timeout: time.Second}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("exited before it was ready")
		default:
		}
		if url == "" {
			return true, nil
		}
		resp, err := httpClient.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err == nil {
		err = r.replacePod(ctx, pod)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		p.ready = true
	case ctx.Err() == nil:
		r.t.Logf("pod runner: readiness of %s: %v", pod.Name, err)
		if p.process != nil {
			_ = p.process.Kill()
		}
	}
}

// replacePod deletes the replica's Pod if there is one, creates pod and
// marks it ready.
func (r *podRunner) replacePod(ctx context.Context, pod *corev1.Pod) error {
	r.deletePod(ctx, pod.Name)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := r.c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the old pod to go: %w", err)
	}
	if err := r.c.Create(ctx, pod.DeepCopy()); err != nil {
		return fmt.Errorf("creating the pod: %w", err)
	}
	return r.setPodReady(ctx, pod.Name, corev1.ConditionTrue)
}

// setPodReady sets the Pod's Ready condition, as the kubelet reports it.
func (r *podRunner) setPodReady(ctx context.Context, name string, status corev1.ConditionStatus) error {
	var pod corev1.Pod
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: wardenNamespace, Name: name}, &pod); err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	return r.c.Status().Update(ctx, &pod)
}

// podName is the name of ordinal ord's Pod.
func (r *podRunner) podName(ord int) string {
	return fmt.Sprintf("%s-%d", r.statefulSet, ord)
}

// deletePod deletes a replica's Pod at once, as no kubelet will confirm it.
func (r *podRunner) deletePod(ctx context.Context, name string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: wardenNamespace, Name: name}}
	if err := r.c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.t.Logf("pod runner: deleting %s: %v", name, err)
	}
}

// reap notices that p's process exited on its own: it counts the exit,
// marks the Pod not ready and schedules the restart after a backoff.
func (r *podRunner) reap(ctx context.Context, p *replicaProc) {
	if p.exited == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		return
	}
	p.cancel()
	<-p.probing
	r.mu.Lock()
	p.ready, p.process = false, nil
	p.exits++
	r.mu.Unlock()
	p.exited, p.restartAt = nil, time.Now().Add(time.Second)
	name := r.podName(p.ordinal)
	if err := r.setPodReady(ctx, name, corev1.ConditionFalse); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.t.Logf("pod runner: marking %s not ready: %v", name, err)
	}
}

// stop ends p's process, if one runs, without counting it as an exit,
// and forgets its template: the next start runs the StatefulSet's. A
// graceful stop is the kubelet's: SIGTERM, and SIGKILL only after the
// template's termination grace period, so the replica can hand over (its
// Lease, say) as in a cluster.
func (r *podRunner) stop(p *replicaProc, graceful bool) {
	var grace time.Duration
	if graceful && p.tmpl != nil {
		grace = time.Duration(ptr.Deref(p.tmpl.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	}
	p.tmpl, p.hash = nil, ""
	if p.exited == nil {
		return
	}
	p.cancel()
	r.mu.Lock()
	p.ready = false
	process := p.process
	p.process = nil
	r.mu.Unlock()
	if grace > 0 {
		_ = process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	_ = process.Kill()
	<-p.exited
	<-p.probing
	p.exited = nil
}

// refreshMounts rewrites the files of p's Secret and ConfigMap volumes
// whose object changed, as the kubelet does; a missing object leaves them.
func (r *podRunner) refreshMounts(ctx context.Context, p *replicaProc, cache objectCache) {
	for i := range p.mounts {
		m := &p.mounts[i]
		d, err := r.objectData(ctx, cache, m.volume)
		if err != nil || d.version == m.version {
			continue
		}
		if err := writeVolume(m.dir, m.volume, d.data); err != nil {
			r.t.Logf("pod runner: updating volume %q of replica %d: %v", m.volume.Name, p.ordinal, err)
			continue
		}
		m.version = d.version
	}
}

// objectData reads the Secret or ConfigMap that v mounts, once per cache.
func (r *podRunner) objectData(ctx context.Context, cache objectCache, v corev1.Volume) (objectData, error) {
	key := client.ObjectKey{Namespace: wardenNamespace}
	var obj client.Object
	if v.Secret != nil {
		key.Name, obj = v.Secret.SecretName, &corev1.Secret{}
	} else {
		key.Name, obj = v.ConfigMap.Name, &corev1.ConfigMap{}
	}
	id := fmt.Sprintf("%T/%s", obj, key.Name)
	if d, ok := cache[id]; ok {
		return d, nil
	}
	if err := r.c.Get(ctx, key, obj); err != nil {
		return objectData{}, fmt.Errorf("reading the object of volume %q: %w", v.Name, err)
	}
	d := objectData{version: obj.GetResourceVersion(), data: map[string][]byte{}}
	switch o := obj.(type) {
	case *corev1.Secret:
		d.data = o.Data
	case *corev1.ConfigMap:
		maps.Copy(d.data, o.BinaryData)
		for k, s := range o.Data {
			d.data[k] = []byte(s)
		}
	}
	cache[id] = d
	return d, nil
}

// writeVolume writes the files a Secret or ConfigMap volume shows (its items,
// or every key), each atomically and only if it changed, tls.key before
// tls.crt since the policy server reloads its certificate when tls.crt
// changes.
func writeVolume(dir string, v corev1.Volume, data map[string][]byte) error {
	var items []corev1.KeyToPath
	if v.Secret != nil {
		items = v.Secret.Items
	} else {
		items = v.ConfigMap.Items
	}
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(data)) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, certificate := range []bool{false, true} {
		for _, item := range items {
			if (item.Key == corev1.TLSCertKey) != certificate {
				continue
			}
			content, ok := data[item.Key]
			if !ok {
				return fmt.Errorf("key %q is missing", item.Key)
			}
			if err := writeFileAtomic(filepath.Join(dir, item.Path), content); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFileAtomic replaces path with content through a rename, so a reader
// never sees a partial file.
func writeFileAtomic(path string, content []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err := errors.Join(err, f.Close(), os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// freshDir empties dir, making it if needed.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// localPaths rewrites the container paths in s (one path, or a
// comma-separated list) that lie under a mount path to the local directory
// standing in for it; the deepest mount path wins, as it hides the others.
func localPaths(s string, paths map[string]string) string {
	parts := strings.Split(s, ",")
	for i, part := range parts {
		deepest := ""
		for mountPath := range paths {
			rest, ok := strings.CutPrefix(part, mountPath)
			if ok && (rest == "" || strings.HasPrefix(rest, "/")) && len(mountPath) > len(deepest) {
				deepest = mountPath
			}
		}
		if deepest != "" {
			parts[i] = paths[deepest] + strings.TrimPrefix(part, deepest)
		}
	}
	return strings.Join(parts, ",")
}

// templateHash tells versions of a pod template apart.
func templateHash(tmpl *corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(tmpl) // a PodTemplateSpec always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// unusedPort is freePort for the runner's goroutine, which must not call
// t.Fatal.
func unusedPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *podRunner) isReady(p *replicaProc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return p.ready
}

// kill SIGKILLs ordinal ord's process; run then restarts it as after a crash.
func (r *podRunner) kill(ord int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.replicas[ord]; ok && p.process != nil {
		_ = p.process.Kill()
	}
}

// terminate SIGTERMs ordinal ord's process, as the kubelet does to a pod
// being deleted, and returns a channel closed when it has exited (nil if
// none runs); run then restarts it as after a crash.
func (r *podRunner) terminate(ord int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.replicas[ord]
	if !ok || p.process == nil {
		return nil
	}
	_ = p.process.Signal(syscall.SIGTERM)
	return p.exited
}

// restarts is how many times ordinal ord's process exited on its own (or
// through kill).
func (r *podRunner) restarts(ord int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.replicas[ord]; ok {
		return p.exits
	}
	return 0
}

// output is what ordinal ord's processes wrote so far, all of them.
func (r *podRunner) output(ord int) string {
	r.mu.Lock()
	p, ok := r.replicas[ord]
	r.mu.Unlock()
	if !ok {
		return ""
	}
	return p.logs.String()
}

// claimDir is the directory standing in for the PersistentVolumeClaim
// claim, shared by every replica.
func (r *podRunner) claimDir(claim string) string {
	return filepath.Join(r.dir, "claims", claim)
}

// readyReplicas is how many replicas are ready.
func (r *podRunner) readyReplicas() int {
	return len(r.readyPorts())
}

// readyPorts are the webhook ports of the ready replicas, by ordinal.
func (r *podRunner) readyPorts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ports []int
	for _, ord := range slices.Sorted(maps.Keys(r.replicas)) {
		if p := r.replicas[ord]; p.ready {
			ports = append(ports, p.port)
		}
	}
	return ports
}

// roundRobin stands in for the policy server's Service: it passes each TCP
// connection, TLS untouched, to the next ready replica.
type roundRobin struct {
	runner   *podRunner
	listener net.Listener
	next     atomic.Uint64
}

// newRoundRobin listens on 127.0.0.1:port until the test ends. Connections
// under way then end with the replicas or the API server.
func newRoundRobin(t *testing.T, r *podRunner, port int) *roundRobin {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rr := &roundRobin{runner: r, listener: l}
	go rr.serve()
	return rr
}

func (rr *roundRobin) serve() {
	for {
		conn, err := rr.listener.Accept()
		if err != nil {
			return // closed at cleanup
		}
		go rr.forward(conn.(*net.TCPConn))
	}
}

// forward copies bytes both ways between down and a ready replica until
// both sides are done; with no replica ready it closes down, as a Service
// without endpoints refuses.
func (rr *roundRobin) forward(down *net.TCPConn) {
	defer down.Close()
	ports := rr.runner.readyPorts()
	if len(ports) == 0 {
		return
	}
	port := ports[int(rr.next.Add(1)%uint64(len(ports)))]
	up, err := net.DialTCP("tcp", nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return // the replica went away since; the client sees a closed connection
	}
	defer up.Close()
	upstream := make(chan struct{})
	go func() {
		defer close(upstream)
		_, _ = io.Copy(up, down)
		_ = up.CloseWrite()
	}()
	_, _ = io.Copy(down, up)
	_ = down.CloseWrite()
	<-upstream
}
