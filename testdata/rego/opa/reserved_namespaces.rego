# A Kubewarden-style OPA policy: it answers with a whole AdmissionReview.
# Namespaces the settings list as reserved are off limits; objects without
# an owner label get a warning.
package policy

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}

denials contains sprintf("namespace %q is reserved", [input.request.namespace]) if {
	input.request.namespace in data.reserved_namespaces
}

warnings contains sprintf("%v has no owner label", [input.request.name]) if {
	not input.request.object.metadata.labels.owner
}

response := {
	"uid": input.request.uid,
	"allowed": false,
	"status": {"message": concat(", ", denials), "code": 403},
	"warnings": sort(warnings),
} if {
	count(denials) > 0
} else := {
	"uid": input.request.uid,
	"allowed": true,
	"warnings": sort(warnings),
	"auditAnnotations": {"checked-by": "reserved-namespaces"},
}
