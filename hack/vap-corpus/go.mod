// Module vap-corpus pins the public modules whose ValidatingAdmissionPolicies
// and MutatingAdmissionPolicies, with the objects their own tests send, make
// the corpus of the differential test test/cluster/vapdiff_test.go: the test
// finds them in the module cache with `go mod download -json` run in this
// directory (hack/cluster-test.sh downloads them first). No file of theirs is
// copied into the repository; README.md lists what is taken from each.
//
// The modules are required for their files only: no package of theirs is
// built, so go.sum holds their own two lines each and nothing else. Do not
// run go mod tidy here, which would drop them.
module github.com/wardenhq/warden/hack/vap-corpus

go 1.26.6

require (
	github.com/kyverno/kyverno v1.19.1
	k8s.io/kubernetes v1.36.3
)
