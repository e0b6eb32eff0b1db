# A Kubewarden-style OPA policy that reads the cluster: nothing may be
# created in a namespace labelled frozen=true (data.kubernetes.namespaces,
# a cluster-scoped kind: by name), nor a ConfigMap in a namespace that has
# max_configmaps already (data.kubernetes.configmaps: by namespace, then
# name).
package policy

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}

namespace := input.request.namespace

denials contains sprintf("namespace %v is frozen", [namespace]) if {
	data.kubernetes.namespaces[namespace].metadata.labels.frozen == "true"
}

denials contains sprintf("namespace %v has %v ConfigMaps already", [namespace, n]) if {
	input.request.kind.kind == "ConfigMap"
	n := count(object.get(data.kubernetes, ["configmaps", namespace], {}))
	n >= data.max_configmaps
}

response := {
	"uid": input.request.uid,
	"allowed": false,
	"status": {"message": concat(", ", denials), "code": 403},
} if {
	count(denials) > 0
} else := {"uid": input.request.uid, "allowed": true}
