package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// nowhere is the node every benchmark pod is bound to. No node has this
// name, so no kubelet ever starts the pods and the scheduler leaves them
// alone: a creation is the API server's work (admission, validation, etcd)
// and nothing else.
const nowhere = "admissionbench-nowhere"

// managedBy is the value of the app.kubernetes.io/managed-by label on the
// namespaces and pods admissionbench creates.
const managedBy = "admissionbench"

const labelManagedBy = "app.kubernetes.io/managed-by"

// benchPod is the pod the benchmark creates: an ordinary web server's pod
// that passes the restricted Pod Security Standard (so every policy of
// pss-policies.yaml admits it). It is 0.9 KB of JSON as sent, 1.8 KB with
// the defaults and the ServiceAccount volume the API server adds before the
// webhooks see it (and managedFields besides). policies_test.go checks it
// against the policies.
func benchPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      name,
			Labels: map[string]string{
				"app.kubernetes.io/name": "admissionbench",
				labelManagedBy:           managedBy,
			},
		},
		Spec: corev1.PodSpec{
			NodeName:                      nowhere,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				FSGroup:        ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           "localhost/warden/probe:1",
				ImagePullPolicy: corev1.PullNever,
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:             []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("10m"),
						corev1.ResourceMemory: resource.MustParse("16Mi"),
					},
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					ReadOnlyRootFilesystem:   ptr.To(true),
					RunAsNonRoot:             ptr.To(true),
				},
			}},
			Volumes: []corev1.Volume{{
				Name:         "tmp",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("16Mi"))}},
			}},
		},
	}
}

// violatingPod is benchPod with a privileged container, which the API
// server's validation accepts (allowPrivilegeEscalation is left unset, as
// privileged requires) and the policy admissionbench-pss-privileged rejects.
// first-rejection creates it in dry-run.
func violatingPod(namespace, name string) *corev1.Pod {
	pod := benchPod(namespace, name)
	sc := pod.Spec.Containers[0].SecurityContext
	sc.Privileged = ptr.To(true)
	sc.AllowPrivilegeEscalation = nil
	return pod
}
