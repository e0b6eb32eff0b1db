# A mutating OPA policy: objects without a team label get one, through a
# JSONPatch in the AdmissionResponse.
package policy

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": response,
}

response := {
	"uid": input.request.uid,
	"allowed": true,
	"patchType": "JSONPatch",
	"patch": base64.encode(json.marshal([{"op": "add", "path": "/metadata/labels/team", "value": data.team}])),
} if {
	not input.request.object.metadata.labels.team
} else := {"uid": input.request.uid, "allowed": true}
