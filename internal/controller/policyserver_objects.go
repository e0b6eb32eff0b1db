package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	policiesv1 "github.com/wardenhq/warden/api/policies/v1"
)

// The builders below fill in the desired state of a policy server's
// objects in place, so that CreateOrUpdate keeps what other writers
// (defaulting, the API server) added.

// podLabels are the labels of a policy server's pods for a given version of
// its ConfigMap.
func podLabels(ps *policiesv1.PolicyServer, configVersion string) map[string]string {
	labels := commonLabels(ps.NameWithPrefix())
	maps.Copy(labels, ps.Spec.Labels)
	labels["app"] = ps.AppLabel()
	labels[policyServerLabel] = ps.Name
	labels[configVersionLabel] = configVersion
	return labels
}

// rolloutReplicas is how many replicas a policy server's StatefulSet runs
// for a PolicyServer that wants want; live is the StatefulSet as it is, and
// templateChanged says whether its pod template is about to change.
//
// A StatefulSet replaces a pod by deleting it before it creates the new
// one. With two replicas or more the others serve meanwhile; with one, the
// Service has no endpoint until the new pod is ready, and the policies'
// webhooks, which fail closed, refuse every request they match: a helm
// upgrade or a sources change was an outage. So a lone replica gets a
// second one while its template changes: the StatefulSet creates ordinal 1
// from the new template, replaces ordinal 0 only once ordinal 1 is ready,
// and the surge ends when the rollout has. A StatefulSet whose status no
// controller has written yet (just created, or a test cluster without one)
// has nothing to replace and gets want.
//
// "Ready" is available here: ready for rolloutMinReadySeconds. A pod is put
// behind the Service a moment after the kubelet reports it ready (the
// EndpointSlice controller, then the API server's informer of the slices);
// a rollout that deleted the old pod as soon as the new one was ready left
// the Service without an endpoint in that moment, and the end-to-end test's
// helm upgrade saw admissions refused ("no endpoints available").
func rolloutReplicas(live *appsv1.StatefulSet, templateChanged bool, want int32) int32 {
	st := live.Status
	if want != 1 || st.ObservedGeneration == 0 {
		return want
	}
	if templateChanged {
		return 2
	}
	surging := ptr.Deref(live.Spec.Replicas, 1) == 2
	rolling := st.ObservedGeneration < live.Generation || st.UpdateRevision != st.CurrentRevision ||
		st.UpdatedReplicas < 2 || st.AvailableReplicas < 2
	if surging && rolling {
		return 2
	}
	return 1
}

// rolloutMinReadySeconds is how long a policy server's pod is ready before
// it counts as available: time for the Service's endpoints to list it.
const rolloutMinReadySeconds = 5

// templateHash identifies a pod template the controller asks for.
func templateHash(tmpl *corev1.PodTemplateSpec) (string, error) {
	b, err := json.Marshal(tmpl)
	if err != nil {
		return "", fmt.Errorf("hashing the pod template: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// desiredStatefulSet sets sts to run ps with the ConfigMap at configVersion.
func (r *PolicyServerReconciler) desiredStatefulSet(sts *appsv1.StatefulSet, ps *policiesv1.PolicyServer, configVersion string, hasSources bool) {
	if sts.Labels == nil {
		sts.Labels = map[string]string{}
	}
	maps.Copy(sts.Labels, commonLabels(ps.NameWithPrefix()))
	sts.Labels[policyServerLabel] = ps.Name
	if sts.Annotations == nil {
		sts.Annotations = map[string]string{}
	}
	sts.Annotations[configVersionLabel] = configVersion

	sts.Spec.Replicas = ptr.To(ps.Spec.Replicas)
	sts.Spec.ServiceName = ps.NameWithPrefix()
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	// A rolling update replaces the next pod only once the last one has
	// been available this long (rolloutReplicas).
	sts.Spec.MinReadySeconds = rolloutMinReadySeconds
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": ps.AppLabel()}}

	tmpl := &sts.Spec.Template
	tmpl.Labels = podLabels(ps, configVersion)
	tmpl.Annotations = maps.Clone(ps.Spec.Annotations)
	r.desiredPodSettings(&tmpl.Spec, ps)
	in := r.serverInputs(ps, hasSources)
	if r.observabilityInputs(&in) {
		tmpl.Annotations = setAnnotation(tmpl.Annotations, otelInjectAnnotation, "true")
	}
	tmpl.Spec.Volumes = in.volumes
	tmpl.Spec.Containers = []corev1.Container{policyServerContainer(ps, in)}
}

// desiredPodSettings sets what spec says of a policy server's pod besides
// its volumes and container: its service account, where it is scheduled,
// its network, image pull secrets and security context.
func (r *PolicyServerReconciler) desiredPodSettings(spec *corev1.PodSpec, ps *policiesv1.PolicyServer) {
	spec.ServiceAccountName = ps.Spec.ServiceAccountName
	spec.Tolerations = ps.Spec.Tolerations
	spec.PriorityClassName = ps.Spec.PriorityClassName
	spec.Affinity = nil
	if !isEmptyAffinity(ps.Spec.Affinity) {
		spec.Affinity = ps.Spec.Affinity.DeepCopy()
	}
	spec.ImagePullSecrets = nil
	if ps.Spec.ImagePullSecret != "" {
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: ps.Spec.ImagePullSecret}}
	}
	for _, name := range r.Pods.ImagePullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	spec.HostNetwork = r.Pods.HostNetwork
	spec.DNSPolicy = corev1.DNSClusterFirst
	if r.Pods.HostNetwork {
		spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	spec.SecurityContext = ps.Spec.SecurityContexts.Pod
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
}

// podInputs is what configures the policy server in its pod: the pod's
// volumes, their mounts in the container and the container's environment,
// each in the order it is added.
type podInputs struct {
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
	env     []corev1.EnvVar
}

// mount adds the volume v, mounted as m, and env.
func (in *podInputs) mount(v corev1.Volume, m corev1.VolumeMount, env ...corev1.EnvVar) {
	in.volumes = append(in.volumes, v)
	in.mounts = append(in.mounts, m)
	in.env = append(in.env, env...)
}

// mountFile adds the volume called name, with one file of a ConfigMap or
// Secret (src), mounted read-only as dir/file, and sets pathVar, unless
// empty, to that path.
func (in *podInputs) mountFile(name string, src corev1.VolumeSource, dir, file, pathVar string) {
	var env []corev1.EnvVar
	if pathVar != "" {
		env = append(env, corev1.EnvVar{Name: pathVar, Value: dir + "/" + file})
	}
	in.mount(corev1.Volume{Name: name, VolumeSource: src}, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true}, env...)
}

// configMapKey is the key of the ConfigMap called name as a volume holding
// it as file.
func configMapKey(name, key, file string) corev1.VolumeSource {
	return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name},
		Items:                []corev1.KeyToPath{{Key: key, Path: file}},
	}}
}

// secretKey is the key of the Secret called name as a volume holding it
// as file.
func secretKey(name, key, file string) corev1.VolumeSource {
	return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: name,
		Items:      []corev1.KeyToPath{{Key: key, Path: file}},
	}}
}

// serverInputs is the policy server's configuration for ps: its
// certificates, store and listening ports, cluster mode (RFC 000), the
// files its PolicyServer names (sources when hasSources, verification and
// Sigstore trust configs, pull secret, shared cache), mutual TLS, and
// last the PolicyServer's own env.
func (r *PolicyServerReconciler) serverInputs(ps *policiesv1.PolicyServer, hasSources bool) podInputs {
	var in podInputs
	in.mount(corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ps.NameWithPrefix()}}},
		corev1.VolumeMount{Name: "certs", MountPath: pkiDir, ReadOnly: true})
	in.mount(corev1.Volume{Name: "policy-store", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.VolumeMount{Name: "policy-store", MountPath: storeDir})
	// Cluster mode (RFC 000): each replica serves the PolicyRevisions of
	// the PolicyServer and reports on them as the replica its pod name
	// ends with.
	in.env = []corev1.EnvVar{
		{Name: "KUBEWARDEN_CERT_FILE", Value: pkiDir + "/tls.crt"},
		{Name: "KUBEWARDEN_KEY_FILE", Value: pkiDir + "/tls.key"},
		{Name: "KUBEWARDEN_PORT", Value: strconv.Itoa(int(ps.EffectiveWebhookPort()))},
		{Name: "KUBEWARDEN_READINESS_PROBE_PORT", Value: strconv.Itoa(int(ps.EffectiveReadinessProbePort()))},
		{Name: "KUBEWARDEN_POLICIES_DOWNLOAD_DIR", Value: storeDir},
		{Name: "WARDEN_CACHE_DIR", Value: storeDir + "/compiled"},
		{Name: "KUBEWARDEN_POLICY_SERVER_NAME", Value: ps.Name},
		{Name: "KUBEWARDEN_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "KUBEWARDEN_POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
	}
	if c := ps.Spec.PolicyCache; c != nil {
		in.mount(corev1.Volume{Name: "policy-cache", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName},
		}}, corev1.VolumeMount{Name: "policy-cache", MountPath: policyCacheDir},
			corev1.EnvVar{Name: "WARDEN_SHARED_CACHE_DIR", Value: policyCacheDir},
			corev1.EnvVar{Name: "WARDEN_CACHE_SIGNING_CERT_FILE", Value: pkiDir + "/" + cacheSigningCertKey},
			corev1.EnvVar{Name: "WARDEN_CACHE_SIGNING_KEY_FILE", Value: pkiDir + "/" + cacheSigningKeyKey},
			corev1.EnvVar{Name: "WARDEN_CACHE_CA_FILE", Value: pkiDir + "/" + caCertKey})
	}
	if caps := ps.Spec.NamespacedPoliciesCapabilities; len(caps) > 0 {
		in.env = append(in.env, corev1.EnvVar{Name: "KUBEWARDEN_NAMESPACED_POLICIES_CAPABILITIES", Value: strings.Join(caps, ",")})
	}
	if hasSources {
		in.mountFile("sources", configMapKey(ps.NameWithPrefix(), sourcesKey, sourcesKey), "/sources", sourcesKey, "KUBEWARDEN_SOURCES_PATH")
	}
	if name := ps.Spec.VerificationConfig; name != "" {
		in.mountFile("verification", configMapKey(name, "verification-config", "verification.yml"),
			"/verification", "verification.yml", "KUBEWARDEN_VERIFICATION_CONFIG_PATH")
	}
	if name := ps.Spec.SigstoreTrustConfig; name != "" {
		file := sigstoreTrustConfigKey + ".json"
		in.mountFile("sigstore-trust", configMapKey(name, sigstoreTrustConfigKey, file), "/sigstore-trust", file, "KUBEWARDEN_SIGSTORE_TRUST_CONFIG_PATH")
	}
	if name := ps.Spec.ImagePullSecret; name != "" {
		in.mountFile("imagepullsecret", secretKey(name, ".dockerconfigjson", "config.json"),
			"/home/kubewarden/.docker", "config.json", "KUBEWARDEN_DOCKER_CONFIG_JSON_PATH")
	}
	if r.AlwaysAcceptOnDeploymentsNamespace {
		in.env = append(in.env, corev1.EnvVar{Name: "KUBEWARDEN_ALWAYS_ACCEPT_ADMISSION_REVIEWS_ON_NAMESPACE", Value: r.Namespace})
	}
	if name := r.Pods.ClientCAConfigMap; name != "" {
		in.mountFile("kubewarden-ca", secretKey(caSecretName, caCertKey, caCertKey), "/ca", caCertKey, "")
		in.mountFile("client-ca", configMapKey(name, clientCAKey, clientCAKey), "/client-ca", clientCAKey, "")
		in.env = append(in.env, corev1.EnvVar{Name: "KUBEWARDEN_CLIENT_CA_FILE", Value: "/ca/" + caCertKey + ",/client-ca/" + clientCAKey})
	}
	in.env = append(in.env, ps.Spec.Env...)
	return in
}

// observabilityInputs sets the controller's metrics and tracing settings
// in in, over the PolicyServer's env, as in Kubewarden, and says whether
// the pod asks for the OpenTelemetry collector sidecar.
func (r *PolicyServerReconciler) observabilityInputs(in *podInputs) (sidecar bool) {
	if r.EnableMetrics {
		in.env = setEnv(in.env, "KUBEWARDEN_ENABLE_METRICS", "true")
	}
	if r.Pods.EnableTracing {
		in.env = setEnv(in.env, "KUBEWARDEN_LOG_FMT", "otlp")
	}
	if !r.EnableMetrics && !r.Pods.EnableTracing {
		return false
	}
	switch {
	case !r.Pods.OtelSidecar:
		for _, e := range r.Pods.OtelEnv {
			in.env = setEnv(in.env, e.Name, e.Value)
		}
		r.otelCertificateMounts(in)
		if r.EnableMetrics {
			// No collector sidecar serves Prometheus on the Service's
			// metrics port: the policy server does, so a ServiceMonitor
			// written for Kubewarden scrapes it.
			in.env = setEnv(in.env, "WARDEN_METRICS_PORT", strconv.Itoa(metricsTargetPort))
		}
	case !r.Pods.HostNetwork:
		in.env = setEnv(in.env, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317")
		return true
	}
	return false
}

// otelCertificateMounts mounts the OpenTelemetry collector's CA and the
// client certificate Secrets in the directories the replicated
// OTEL_EXPORTER_OTLP_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE
// name.
func (r *PolicyServerReconciler) otelCertificateMounts(in *podInputs) {
	for _, m := range []struct{ volume, secret, pathVar string }{
		{"otel-collector-certificate", r.Pods.OtelCertificateSecret, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"otel-collector-client-certificate", r.Pods.OtelClientCertificateSecret, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
	} {
		if m.secret == "" {
			continue
		}
		dir := "/otel"
		for _, e := range r.Pods.OtelEnv {
			if e.Name == m.pathVar {
				dir = path.Dir(e.Value)
			}
		}
		in.mount(corev1.Volume{Name: m.volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: m.secret, DefaultMode: ptr.To[int32](0o420),
		}}}, corev1.VolumeMount{Name: m.volume, MountPath: dir, ReadOnly: true})
	}
}

// policyServerContainer is the policy server's container for ps,
// configured by in.
func policyServerContainer(ps *policiesv1.PolicyServer, in podInputs) corev1.Container {
	securityContext := ps.Spec.SecurityContexts.Container
	if securityContext == nil {
		securityContext = &corev1.SecurityContext{
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	return corev1.Container{
		Name:            "policy-server",
		Image:           ps.Spec.Image,
		Env:             in.env,
		VolumeMounts:    in.mounts,
		SecurityContext: securityContext,
		Ports:           []corev1.ContainerPort{{Name: "webhook", ContainerPort: ps.EffectiveWebhookPort(), Protocol: corev1.ProtocolTCP}},
		Resources:       corev1.ResourceRequirements{Limits: ps.Spec.Limits, Requests: ps.Spec.Requests},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readiness", Port: intstr.FromInt32(ps.EffectiveReadinessProbePort()), Scheme: corev1.URISchemeHTTP,
		}}},
	}
}

// setEnv sets name to value in env, in place of an earlier value.
func setEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			env[i] = corev1.EnvVar{Name: name, Value: value}
			return env
		}
	}
	return append(env, corev1.EnvVar{Name: name, Value: value})
}

func setAnnotation(annotations map[string]string, key, value string) map[string]string {
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[key] = value
	return annotations
}

// metricsTargetPort is the pod port behind the policy-server Service's
// metrics port, as in Kubewarden: the OpenTelemetry collector sidecar's
// Prometheus exporter when there is one, the policy server's own
// /metrics otherwise.
const metricsTargetPort = 8080

// desiredService sets svc to expose ps's webhook on port 443.
func (r *PolicyServerReconciler) desiredService(svc *corev1.Service, ps *policiesv1.PolicyServer) {
	if svc.Labels == nil {
		svc.Labels = map[string]string{}
	}
	maps.Copy(svc.Labels, commonLabels(ps.NameWithPrefix()))
	svc.Labels[policyServerLabel] = ps.Name
	svc.Spec.Selector = map[string]string{"app.kubernetes.io/instance": ps.NameWithPrefix()}
	svc.Spec.Ports = []corev1.ServicePort{{
		Name: "policy-server", Port: 443, Protocol: corev1.ProtocolTCP,
		TargetPort: intstr.FromInt32(ps.EffectiveWebhookPort()),
	}}
	if r.EnableMetrics {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "metrics", Port: ps.EffectiveMetricsPort(r.MetricsPort), Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromInt32(metricsTargetPort),
		})
	}
}

// desiredPDB sets pdb from ps's minAvailable or maxUnavailable.
func desiredPDB(pdb *policyv1.PodDisruptionBudget, ps *policiesv1.PolicyServer) {
	if pdb.Labels == nil {
		pdb.Labels = map[string]string{}
	}
	maps.Copy(pdb.Labels, commonLabels(ps.NameWithPrefix()))
	pdb.Spec.MinAvailable = ps.Spec.MinAvailable
	pdb.Spec.MaxUnavailable = ps.Spec.MaxUnavailable
	pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": ps.AppLabel()}}
}

func isEmptyAffinity(a corev1.Affinity) bool {
	return a.NodeAffinity == nil && a.PodAffinity == nil && a.PodAntiAffinity == nil
}
