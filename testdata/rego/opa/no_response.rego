# Answers with an AdmissionReview that has no response.
package policy

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"answer": {"allowed": true},
}
