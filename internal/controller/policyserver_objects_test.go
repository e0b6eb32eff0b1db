package controller

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// The controller-wide pod settings (Kubewarden's controller flags) shape
// every policy server's StatefulSet.
func TestStatefulSetPodSettings(t *testing.T) {
	ps := &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: policiesv1.PolicyServerSpec{
			Image: "img", Replicas: 1, ImagePullSecret: "own",
			Env: []corev1.EnvVar{{Name: "KUBEWARDEN_LOG_FMT", Value: "json"}, {Name: "EXTRA", Value: "1"}},
		},
	}
	otel := []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_CERTIFICATE", Value: "/otel/ca/ca.crt"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "https://collector:4317"},
	}
	tests := []struct {
		name  string
		r     PolicyServerReconciler
		cache *policiesv1.PolicyCache
		check func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string) {
				if spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirst {
					t.Errorf("hostNetwork %v, dnsPolicy %s", spec.HostNetwork, spec.DNSPolicy)
				}
				if _, ok := env["KUBEWARDEN_CLIENT_CA_FILE"]; ok {
					t.Error("mutual TLS without a client CA ConfigMap")
				}
				if _, ok := env["WARDEN_SHARED_CACHE_DIR"]; ok || mountOf(spec, "policy-cache") != nil {
					t.Error("a shared cache without spec.policyCache")
				}
				if env["KUBEWARDEN_LOG_FMT"] != "json" {
					t.Errorf("the PolicyServer's own KUBEWARDEN_LOG_FMT = %q, want json", env["KUBEWARDEN_LOG_FMT"])
				}
			},
		},
		{
			name: "tracing and metrics to the controller's collector",
			r: PolicyServerReconciler{EnableMetrics: true, Pods: PodSettings{
				EnableTracing: true, OtelEnv: otel, OtelCertificateSecret: "collector-ca",
			}},
			check: func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string) {
				if env["KUBEWARDEN_LOG_FMT"] != "otlp" || env["KUBEWARDEN_ENABLE_METRICS"] != "true" || env["EXTRA"] != "1" {
					t.Errorf("env %v", env)
				}
				if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "https://collector:4317" || env["OTEL_EXPORTER_OTLP_CERTIFICATE"] != "/otel/ca/ca.crt" {
					t.Errorf("the controller's OTLP settings are not replicated: %v", env)
				}
				if mount := mountOf(spec, "otel-collector-certificate"); mount == nil || mount.MountPath != "/otel/ca" {
					t.Errorf("collector CA mount %+v, want /otel/ca", mount)
				}
				if annotations[otelInjectAnnotation] != "" {
					t.Error("sidecar requested without --enable-otel-sidecar")
				}
				if env["WARDEN_METRICS_PORT"] != "8080" {
					t.Errorf("WARDEN_METRICS_PORT = %q, want 8080: nothing else serves the Service's metrics port", env["WARDEN_METRICS_PORT"])
				}
			},
		},
		{
			name: "sidecar",
			r:    PolicyServerReconciler{EnableMetrics: true, Pods: PodSettings{OtelSidecar: true, OtelEnv: otel}},
			check: func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string) {
				if annotations[otelInjectAnnotation] != "true" || env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://localhost:4317" {
					t.Errorf("annotations %v, env %v", annotations, env)
				}
				if _, ok := env["OTEL_EXPORTER_OTLP_CERTIFICATE"]; ok {
					t.Error("the controller's collector settings were replicated next to a sidecar")
				}
				if _, ok := env["WARDEN_METRICS_PORT"]; ok {
					t.Error("the policy server takes the metrics port of the collector sidecar")
				}
			},
		},
		{
			name: "mutual TLS, host network and pull secrets",
			r: PolicyServerReconciler{Pods: PodSettings{
				ClientCAConfigMap: "client-ca", HostNetwork: true, ImagePullSecrets: []string{"a", "b"},
			}},
			check: func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string) {
				if env["KUBEWARDEN_CLIENT_CA_FILE"] != "/ca/ca.crt,/client-ca/client-ca.crt" {
					t.Errorf("KUBEWARDEN_CLIENT_CA_FILE = %q", env["KUBEWARDEN_CLIENT_CA_FILE"])
				}
				if mountOf(spec, "kubewarden-ca") == nil || mountOf(spec, "client-ca") == nil {
					t.Errorf("CA mounts missing: %+v", spec.Containers[0].VolumeMounts)
				}
				if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
					t.Errorf("hostNetwork %v, dnsPolicy %s", spec.HostNetwork, spec.DNSPolicy)
				}
				var names []string
				for _, s := range spec.ImagePullSecrets {
					names = append(names, s.Name)
				}
				if !slices.Equal(names, []string{"own", "a", "b"}) {
					t.Errorf("imagePullSecrets %v, want [own a b]", names)
				}
			},
		},
		{
			name:  "shared policy cache",
			cache: &policiesv1.PolicyCache{ClaimName: "compiled-policies"},
			check: func(t *testing.T, spec *corev1.PodSpec, annotations map[string]string, env map[string]string) {
				mount := mountOf(spec, "policy-cache")
				if mount == nil || mount.MountPath != env["WARDEN_SHARED_CACHE_DIR"] || mount.ReadOnly {
					t.Fatalf("cache mount %+v, WARDEN_SHARED_CACHE_DIR %q", mount, env["WARDEN_SHARED_CACHE_DIR"])
				}
				i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "policy-cache" })
				if claim := spec.Volumes[i].PersistentVolumeClaim; claim == nil || claim.ClaimName != "compiled-policies" {
					t.Errorf("cache volume %+v, want the claim compiled-policies", spec.Volumes[i])
				}
				// The signing files come from the policy server's Secret,
				// mounted at /pki.
				for name, want := range map[string]string{
					"WARDEN_CACHE_SIGNING_CERT_FILE": "/pki/cache-signing.crt",
					"WARDEN_CACHE_SIGNING_KEY_FILE":  "/pki/cache-signing.key",
					"WARDEN_CACHE_CA_FILE":           "/pki/ca.crt",
				} {
					if env[name] != want {
						t.Errorf("%s = %q, want %q", name, env[name], want)
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Namespace = "warden"
			var sts appsv1.StatefulSet
			p := ps.DeepCopy()
			p.Spec.PolicyCache = tc.cache
			tc.r.desiredStatefulSet(&sts, p, "1", false)
			spec := &sts.Spec.Template.Spec
			env := map[string]string{}
			for _, e := range spec.Containers[0].Env {
				if _, dup := env[e.Name]; dup {
					t.Errorf("%s is set twice", e.Name)
				}
				env[e.Name] = e.Value
			}
			tc.check(t, spec, sts.Spec.Template.Annotations, env)
		})
	}
}

// A PolicyServer's verification config and sigstore trust config are its
// ConfigMaps, mounted where the policy server's environment says, as
// Kubewarden mounts them.
func TestStatefulSetVerification(t *testing.T) {
	ps := &policiesv1.PolicyServer{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       policiesv1.PolicyServerSpec{Image: "img", Replicas: 1, VerificationConfig: "verification", SigstoreTrustConfig: "trust"},
	}
	r := PolicyServerReconciler{Namespace: "warden"}
	var sts appsv1.StatefulSet
	r.desiredStatefulSet(&sts, ps, "1", false)
	spec := &sts.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for _, tc := range []struct{ volume, configMap, key, envName, path string }{
		{"verification", "verification", "verification-config", "KUBEWARDEN_VERIFICATION_CONFIG_PATH", "/verification/verification.yml"},
		{"sigstore-trust", "trust", "sigstore-trust-config", "KUBEWARDEN_SIGSTORE_TRUST_CONFIG_PATH", "/sigstore-trust/sigstore-trust-config.json"},
	} {
		if env[tc.envName] != tc.path {
			t.Errorf("%s = %q, want %q", tc.envName, env[tc.envName], tc.path)
		}
		mount := mountOf(spec, tc.volume)
		if mount == nil || !mount.ReadOnly || !strings.HasPrefix(tc.path, mount.MountPath+"/") {
			t.Fatalf("mount %+v, want read-only at the directory of %s", mount, tc.path)
		}
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == tc.volume })
		cm := spec.Volumes[i].ConfigMap
		if cm == nil || cm.Name != tc.configMap || len(cm.Items) != 1 || cm.Items[0].Key != tc.key || mount.MountPath+"/"+cm.Items[0].Path != tc.path {
			t.Errorf("volume %s: %+v, want key %s of ConfigMap %s at %s", tc.volume, spec.Volumes[i], tc.key, tc.configMap, tc.path)
		}
	}

	ps.Spec.SigstoreTrustConfig = ""
	r.desiredStatefulSet(&sts, ps, "1", false)
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "KUBEWARDEN_SIGSTORE_TRUST_CONFIG_PATH" {
			t.Error("a trust config path without spec.sigstoreTrustConfig")
		}
	}
	if mountOf(&sts.Spec.Template.Spec, "sigstore-trust") != nil {
		t.Error("a trust config mount without spec.sigstoreTrustConfig")
	}
}

func mountOf(spec *corev1.PodSpec, name string) *corev1.VolumeMount {
	for i, m := range spec.Containers[0].VolumeMounts {
		if m.Name == name {
			return &spec.Containers[0].VolumeMounts[i]
		}
	}
	return nil
}

func TestOtelEnv(t *testing.T) {
	got := otelEnv([]string{"HOME=/root", "OTEL_EXPORTER_OTLP_TIMEOUT=5", "OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317", "OTEL_SERVICE_NAME=x"})
	want := []corev1.EnvVar{{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://c:4317"}, {Name: "OTEL_EXPORTER_OTLP_TIMEOUT", Value: "5"}}
	if !slices.Equal(got, want) {
		t.Errorf("otelEnv = %v, want %v", got, want)
	}
}

// A lone policy server replica gets a second one while its pod template
// changes, until the rollout is over; more replicas, and a StatefulSet no
// controller reports on, get what the PolicyServer asks.
func TestRolloutReplicas(t *testing.T) {
	sts := func(replicas int32, generation int64, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}, Status: st}
		s.Generation = generation
		return s
	}
	done := func(replicas int32) appsv1.StatefulSetStatus {
		return appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
			UpdatedReplicas: replicas, CurrentRevision: "b", UpdateRevision: "b"}
	}
	for _, tc := range []struct {
		name     string
		live     *appsv1.StatefulSet
		changed  bool
		want     int32
		replicas int32
	}{
		{"one replica, new template", sts(1, 3, done(1)), true, 1, 2},
		{"surging, the new pod not ready", sts(2, 4, appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 1,
			CurrentRevision: "a", UpdateRevision: "b"}), false, 1, 2},
		{"surging, ordinal 0 not replaced yet", sts(2, 4, appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 1,
			CurrentRevision: "a", UpdateRevision: "b"}), false, 1, 2},
		{"surging, status not observed yet", sts(2, 4, done(2)), false, 1, 2},
		// Behind the Service only a moment after it is ready: the surge
		// ends once the replaced pod has been ready rolloutMinReadySeconds.
		{"surging, ordinal 0 replaced and ready, not available yet", sts(2, 3, appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 2,
			ReadyReplicas: 2, AvailableReplicas: 1, UpdatedReplicas: 2, CurrentRevision: "b", UpdateRevision: "b"}), false, 1, 2},
		{"surge over", sts(2, 3, done(2)), false, 1, 1},
		{"one replica, nothing changes", sts(1, 3, done(1)), false, 1, 1},
		{"scaled from two to one", sts(2, 3, done(2)), false, 1, 1},
		{"two replicas roll one at a time", sts(2, 3, done(2)), true, 2, 2},
		{"scaling up during a rollout", sts(2, 3, done(2)), true, 3, 3},
		{"no status yet", sts(1, 1, appsv1.StatefulSetStatus{}), true, 1, 1},
		{"created now", &appsv1.StatefulSet{}, true, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rolloutReplicas(tc.live, tc.changed, tc.want); got != tc.replicas {
				t.Errorf("rolloutReplicas = %d, want %d", got, tc.replicas)
			}
		})
	}
}

// The hash of the desired pod template is the same for the same
// PolicyServer, and changes with what the pods run.
func TestTemplateHash(t *testing.T) {
	r := &PolicyServerReconciler{Namespace: "warden"}
	ps := &policiesv1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: policiesv1.PolicyServerSpec{Image: "warden:a", Replicas: 1}}
	hash := func(ps *policiesv1.PolicyServer) string {
		sts := &appsv1.StatefulSet{}
		r.desiredStatefulSet(sts, ps, "1", false)
		h, err := templateHash(&sts.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a := hash(ps)
	if b := hash(ps.DeepCopy()); a != b {
		t.Errorf("the same PolicyServer hashes %s then %s", a, b)
	}
	upgraded := ps.DeepCopy()
	upgraded.Spec.Image = "warden:b"
	if b := hash(upgraded); a == b {
		t.Errorf("a new image keeps the hash %s", a)
	}
}
