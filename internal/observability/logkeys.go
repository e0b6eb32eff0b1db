package observability

// Log keys used across Warden. Messages are constant; the variable parts go in
// key/value pairs with these keys, so that the same fact always has the same
// key. Where Kubewarden's policy-server traces carry the same fact, the key
// has the same name (allowed, mutated, response_code, ...:
// docs/compatibility.md#tracing).
const (
	// KeyPolicyID is the policy id (policies.yml key or unique policy name).
	KeyPolicyID = "policy_id"
	// KeyRequestUID is the AdmissionRequest uid.
	KeyRequestUID = "request_uid"
	// KeyMode is the policy mode: protect or monitor.
	KeyMode = "policy_mode"
	// KeyAllowed is whether the admission response allowed the request.
	KeyAllowed = "allowed"
	// KeyMutated is whether the admission response carried a patch.
	KeyMutated = "mutated"
	// KeyMessage is the admission response's status message.
	KeyMessage = "response_message"
	// KeyCode is the admission response's status code.
	KeyCode = "response_code"
	// KeyError is an error value.
	KeyError = "error"
	// KeyNamespace is the namespace of the object under review.
	KeyNamespace = "namespace"
	// KeyName is the name of the object under review.
	KeyName = "name"
	// KeyKind is the kind of the object under review.
	KeyKind = "kind"
	// KeyOperation is the admission operation (CREATE, UPDATE, DELETE, CONNECT).
	KeyOperation = "operation"
	// KeyResource is the resource (plural, lower case) of the object under review.
	KeyResource = "resource"
	// KeyPath is a file system path or an HTTP request path.
	KeyPath = "path"
	// KeyAddr is a network address, for example the one a server listens on.
	KeyAddr = "addr"
	// KeyAPIVersion is the apiVersion of a Kubernetes kind a policy reads.
	KeyAPIVersion = "api_version"
	// KeyTable is a table of the reflector store.
	KeyTable = "table"
	// KeyConfigKey is a key of a configuration file, by its path, such as
	// pod-privileged.settings of policies.yml.
	KeyConfigKey = "config_key"
)
