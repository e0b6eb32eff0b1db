package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// PolicyMode is how a policy acts on the requests it evaluates: "protect"
// enforces its answer (rejects, mutates), "monitor" always accepts and only
// logs and counts what it would have done.
// +kubebuilder:validation:Enum=protect;monitor
type PolicyMode string

const (
	// PolicyModeProtect enforces the policy's answer. It is the default.
	PolicyModeProtect PolicyMode = "protect"
	// PolicyModeMonitor accepts every request and records what the policy
	// would have done.
	PolicyModeMonitor PolicyMode = "monitor"
)

// PolicySpec holds the fields shared by AdmissionPolicy and
// ClusterAdmissionPolicy.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutEvalSeconds) || !has(self.timeoutSeconds) || self.timeoutEvalSeconds <= self.timeoutSeconds",message="timeoutEvalSeconds cannot be greater than timeoutSeconds",fieldPath=".timeoutEvalSeconds"
type PolicySpec struct {
	// PolicyServer is the name of the PolicyServer that runs this policy.
	// It defaults to "default" and cannot be changed once set: to move a
	// policy to another PolicyServer, delete it and create it again.
	// +kubebuilder:default=default
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the field is immutable",reason=FieldValueForbidden
	// +optional
	PolicyServer string `json:"policyServer,omitempty"`

	// Mode is "protect" (the default) to enforce the policy, or "monitor" to
	// accept every request while logging and counting what the policy would
	// have rejected or changed. A policy may go from "monitor" to "protect",
	// but not back: switching a policy off needs the right to delete it, so
	// to go from "protect" to "monitor" delete the policy and create it
	// again in monitor mode.
	// +kubebuilder:default=protect
	// +kubebuilder:validation:XValidation:rule="!(oldSelf == 'protect' && self == 'monitor')",message="field cannot transition from protect to monitor. Recreate instead.",reason=FieldValueForbidden
	// +optional
	Mode PolicyMode `json:"mode,omitempty"`

	// Module is where the policy's WebAssembly module is fetched from:
	// registry://host/repository:tag for an OCI registry, https:// or
	// http:// for a web server, file:// for a file on the policy server.
	// A reference without a scheme is read as registry://.
	// +kubebuilder:validation:MinLength=1
	Module string `json:"module"`

	// Settings is the policy's configuration, a free-form object whose
	// shape is defined by the policy. The policy validates it when it is
	// loaded.
	// +optional
	// +nullable
	// +kubebuilder:pruning:PreserveUnknownFields
	Settings runtime.RawExtension `json:"settings,omitempty"`

	// Rules selects the requests sent to the policy: the operations on
	// resources and subresources it evaluates. A request is evaluated when it
	// matches any rule. At least one rule is required, and every rule lists
	// at least one operation, API version and resource.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="a value must be specified",reason=FieldValueRequired
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.operations) && r.operations.size() > 0)",message="every rule must list at least one operation"
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.apiVersions) && r.apiVersions.size() > 0)",message="apiVersions and resources must have specified values"
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.resources) && r.resources.size() > 0)",message="apiVersions and resources must have specified values"
	// +listType=atomic
	Rules []admissionregistrationv1.RuleWithOperations `json:"rules"`

	// FailurePolicy says what the API server does when the policy cannot
	// answer (an error or a timeout): "Fail" rejects the request, "Ignore"
	// lets it through. When unset, the API server's default applies
	// ("Fail").
	// +kubebuilder:validation:Enum=Ignore;Fail
	// +optional
	FailurePolicy *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`

	// Mutating says whether the policy may change the objects it evaluates.
	// A mutating policy is registered through a MutatingWebhookConfiguration
	// and its patches are applied; a non-mutating policy that returns a
	// patch has its request rejected.
	Mutating bool `json:"mutating"`

	// BackgroundAudit says whether the audit scanner evaluates this policy
	// against the objects already in the cluster. Set it to false for a
	// policy whose answer only makes sense for a live request. Defaults to
	// true when the field is absent.
	// +kubebuilder:default=true
	// +optional
	BackgroundAudit bool `json:"backgroundAudit"`

	// MatchPolicy says how rules match requests made through another API
	// group or version of the same resource: "Exact" matches only the group
	// and version listed, "Equivalent" also matches the same resource reached
	// another way (the request is converted to a listed version first).
	// When unset, the API server's default applies ("Equivalent").
	// +kubebuilder:validation:Enum=Exact;Equivalent
	// +optional
	MatchPolicy *admissionregistrationv1.MatchPolicyType `json:"matchPolicy,omitempty"`

	// MatchConditions are CEL expressions, at most 64 with unique names,
	// that a request must all satisfy to be sent to the policy. They are
	// evaluated after rules, namespaceSelector and objectSelector. If any
	// condition is false the policy is skipped; if one fails with an error
	// (and none is false), failurePolicy decides.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`

	// ObjectSelector restricts the policy to objects whose labels match.
	// The old and the new object are both checked, and either matching is
	// enough. Objects that cannot carry labels never match. Anyone who can
	// set labels can escape such a policy, so use it for opt-in policies
	// only. When unset, every object matches.
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// SideEffects declares whether evaluating the policy changes anything
	// outside the request: "None" or "NoneOnDryRun". The webhook is
	// registered with "None" when unset.
	// +kubebuilder:validation:Enum=None;NoneOnDryRun
	// +optional
	SideEffects *admissionregistrationv1.SideEffectClass `json:"sideEffects,omitempty"`

	// TimeoutSeconds is how long the API server waits for the policy's
	// answer, between 2 and 30 seconds; failurePolicy decides what happens
	// past it. Defaults to 10.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// TimeoutEvalSeconds is how long the policy server lets the policy run,
	// between 2 and 30 seconds and not more than timeoutSeconds. When unset,
	// the policy server's own limit applies.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutEvalSeconds *int32 `json:"timeoutEvalSeconds,omitempty"`

	// Message replaces the policy's rejection message. The policy's own
	// message is then kept in the response's status.details.causes.
	// +optional
	Message string `json:"message,omitempty"`
}

// ContextAwareResource names a kind of Kubernetes object that a policy may
// read while it evaluates a request. The policy server reads them with the
// ServiceAccount of the PolicyServer that runs the policy.
type ContextAwareResource struct {
	// APIVersion of the resource: "v1" for the core group,
	// "group/version" for the others.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`

	// Kind of the resource, singular and in PascalCase, such as "Namespace".
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
}

// GroupSpec holds the fields shared by AdmissionPolicyGroup and
// ClusterAdmissionPolicyGroup. A group is never mutating.
type GroupSpec struct {
	// PolicyServer is the name of the PolicyServer that runs this group.
	// It defaults to "default" and cannot be changed once set: to move a
	// group to another PolicyServer, delete it and create it again.
	// +kubebuilder:default=default
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the field is immutable",reason=FieldValueForbidden
	// +optional
	PolicyServer string `json:"policyServer,omitempty"`

	// Mode is "protect" (the default) to enforce the group, or "monitor" to
	// accept every request while logging and counting what the group would
	// have rejected. A group may go from "monitor" to "protect", but not
	// back: delete it and create it again in monitor mode instead.
	// +kubebuilder:default=protect
	// +kubebuilder:validation:XValidation:rule="!(oldSelf == 'protect' && self == 'monitor')",message="field cannot transition from protect to monitor. Recreate instead.",reason=FieldValueForbidden
	// +optional
	Mode PolicyMode `json:"mode,omitempty"`

	// Rules selects the requests sent to the group: the operations on
	// resources and subresources it evaluates. A request is evaluated when it
	// matches any rule. At least one rule is required, and every rule lists
	// at least one operation, API version and resource.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="a value must be specified",reason=FieldValueRequired
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.operations) && r.operations.size() > 0)",message="every rule must list at least one operation"
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.apiVersions) && r.apiVersions.size() > 0)",message="apiVersions and resources must have specified values"
	// +kubebuilder:validation:XValidation:rule="self.all(r, has(r.resources) && r.resources.size() > 0)",message="apiVersions and resources must have specified values"
	// +listType=atomic
	Rules []admissionregistrationv1.RuleWithOperations `json:"rules"`

	// FailurePolicy says what the API server does when the group cannot
	// answer (an error or a timeout): "Fail" rejects the request, "Ignore"
	// lets it through. When unset, the API server's default applies
	// ("Fail").
	// +kubebuilder:validation:Enum=Ignore;Fail
	// +optional
	FailurePolicy *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`

	// BackgroundAudit says whether the audit scanner evaluates this group
	// against the objects already in the cluster. Defaults to true when the
	// field is absent.
	// +kubebuilder:default=true
	// +optional
	BackgroundAudit bool `json:"backgroundAudit"`

	// MatchPolicy says how rules match requests made through another API
	// group or version of the same resource: "Exact" or "Equivalent". When
	// unset, the API server's default applies ("Equivalent").
	// +kubebuilder:validation:Enum=Exact;Equivalent
	// +optional
	MatchPolicy *admissionregistrationv1.MatchPolicyType `json:"matchPolicy,omitempty"`

	// MatchConditions are CEL expressions, at most 64 with unique names,
	// that a request must all satisfy to be sent to the group. If any
	// condition is false the group is skipped; if one fails with an error
	// (and none is false), failurePolicy decides.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`

	// ObjectSelector restricts the group to objects whose labels match.
	// The old and the new object are both checked, and either matching is
	// enough. When unset, every object matches.
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// SideEffects declares whether evaluating the group changes anything
	// outside the request: "None" or "NoneOnDryRun". The webhook is
	// registered with "None" when unset.
	// +kubebuilder:validation:Enum=None;NoneOnDryRun
	// +optional
	SideEffects *admissionregistrationv1.SideEffectClass `json:"sideEffects,omitempty"`

	// TimeoutSeconds is how long the API server waits for the group's
	// answer, between 2 and 30 seconds. Defaults to 10.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// Expression combines the members' answers into the group's answer. It
	// is a CEL expression that must evaluate to a bool; each member is
	// called as a function without arguments that returns true when the
	// member accepts the request, for example
	// "signed() && (trusted_registry() || !privileged())". Members are
	// evaluated only when the expression needs them. When the expression is
	// true the request is accepted, otherwise it is rejected with message.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="must be non-empty",reason=FieldValueRequired
	Expression string `json:"expression"`

	// Message is the rejection message of the group. The messages of the
	// members that rejected the request are returned as its causes.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="must be non-empty",reason=FieldValueRequired
	Message string `json:"message"`
}

// PolicyGroupMember is a policy inside a group, called by its name from the
// group's expression.
type PolicyGroupMember struct {
	// Module is where the member's WebAssembly module is fetched from, as in
	// the module field of a policy.
	// +kubebuilder:validation:MinLength=1
	Module string `json:"module"`

	// Settings is the member's configuration, a free-form object whose
	// shape is defined by the policy.
	// +optional
	// +nullable
	// +kubebuilder:pruning:PreserveUnknownFields
	Settings runtime.RawExtension `json:"settings,omitempty"`

	// TimeoutEvalSeconds is how long the policy server lets this member
	// run, between 2 and 30 seconds. The members' limits together may not
	// exceed the group's timeoutSeconds.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutEvalSeconds *int32 `json:"timeoutEvalSeconds,omitempty"`
}

// PolicyGroupMembers maps member names to the members of an
// AdmissionPolicyGroup. A name is a CEL identifier ([_a-zA-Z][_a-zA-Z0-9]*)
// that is not a CEL reserved word.
type PolicyGroupMembers map[string]PolicyGroupMember

// PolicyGroupMemberWithContext is a member of a ClusterAdmissionPolicyGroup:
// a PolicyGroupMember that may also read cluster objects.
type PolicyGroupMemberWithContext struct {
	PolicyGroupMember `json:",inline"`

	// ContextAwareResources lists the kinds of objects the member may read
	// while it evaluates a request.
	// +listType=atomic
	// +optional
	ContextAwareResources []ContextAwareResource `json:"contextAwareResources,omitempty"`
}

// PolicyGroupMembersWithContext maps member names to the members of a
// ClusterAdmissionPolicyGroup. A name is a CEL identifier
// ([_a-zA-Z][_a-zA-Z0-9]*) that is not a CEL reserved word.
type PolicyGroupMembersWithContext map[string]PolicyGroupMemberWithContext

// PolicyGroupSpec is the spec of an AdmissionPolicyGroup, without the
// fields added by the kind itself.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || self.policies.all(m, !has(self.policies[m].timeoutEvalSeconds) || self.policies[m].timeoutEvalSeconds <= self.timeoutSeconds)",message="timeoutEvalSeconds cannot be greater than group timeoutSeconds",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || self.policies.map(m, has(self.policies[m].timeoutEvalSeconds) ? self.policies[m].timeoutEvalSeconds : 0).sum() <= self.timeoutSeconds",message="the sum of all members' timeoutEvalSeconds cannot be greater than group timeoutSeconds",fieldPath=".policies"
type PolicyGroupSpec struct {
	GroupSpec `json:",inline"`

	// Policies are the members of the group, by name. Each name becomes a
	// function of the group's expression. At least one member is required.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="policy groups must have at least one policy member",reason=FieldValueRequired
	Policies PolicyGroupMembers `json:"policies"`
}

// ClusterPolicyGroupSpec is the spec of a ClusterAdmissionPolicyGroup,
// without the fields added by the kind itself.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || self.policies.all(m, !has(self.policies[m].timeoutEvalSeconds) || self.policies[m].timeoutEvalSeconds <= self.timeoutSeconds)",message="timeoutEvalSeconds cannot be greater than group timeoutSeconds",fieldPath=".policies"
// +kubebuilder:validation:XValidation:rule="!has(self.timeoutSeconds) || self.policies.map(m, has(self.policies[m].timeoutEvalSeconds) ? self.policies[m].timeoutEvalSeconds : 0).sum() <= self.timeoutSeconds",message="the sum of all members' timeoutEvalSeconds cannot be greater than group timeoutSeconds",fieldPath=".policies"
type ClusterPolicyGroupSpec struct {
	GroupSpec `json:",inline"`

	// Policies are the members of the group, by name. Each name becomes a
	// function of the group's expression. At least one member is required.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="policy groups must have at least one policy member",reason=FieldValueRequired
	Policies PolicyGroupMembersWithContext `json:"policies"`
}

// PolicyStatusEnum is the lifecycle phase of a policy, reported in
// status.policyStatus.
// +kubebuilder:validation:Enum=unscheduled;scheduled;pending;active
type PolicyStatusEnum string

const (
	// PolicyStatusUnscheduled means the policy names no PolicyServer.
	PolicyStatusUnscheduled PolicyStatusEnum = "unscheduled"
	// PolicyStatusScheduled means the policy names a PolicyServer that does
	// not exist (yet) or is being deleted.
	PolicyStatusScheduled PolicyStatusEnum = "scheduled"
	// PolicyStatusPending means the PolicyServer exists and the policy is
	// being loaded on it; requests are not sent to the policy yet.
	PolicyStatusPending PolicyStatusEnum = "pending"
	// PolicyStatusActive means the policy is loaded and its webhook is
	// registered: the API server sends it requests.
	PolicyStatusActive PolicyStatusEnum = "active"
)

// PolicyModeStatus is the mode a policy is observed to run in on its
// PolicyServer, reported in status.mode.
// +kubebuilder:validation:Enum=protect;monitor;unknown
type PolicyModeStatus string

const (
	// PolicyModeStatusProtect means the policy runs in protect mode.
	PolicyModeStatusProtect PolicyModeStatus = "protect"
	// PolicyModeStatusMonitor means the policy runs in monitor mode.
	PolicyModeStatusMonitor PolicyModeStatus = "monitor"
	// PolicyModeStatusUnknown means the mode could not be observed.
	PolicyModeStatusUnknown PolicyModeStatus = "unknown"
)

// PolicyConditionType is the type of a condition of a policy or of a
// PolicyRevision.
type PolicyConditionType string

const (
	// PolicyActive is True when the policy's webhook is registered.
	PolicyActive PolicyConditionType = "PolicyActive"
	// PolicyServerConfigurationUpToDate is True when the PolicyServer runs
	// the latest configuration of the policy.
	PolicyServerConfigurationUpToDate PolicyConditionType = "PolicyServerConfigurationUpToDate"
	// PolicyUniquelyReachable is True when only the latest version of the
	// policy can be reached on its PolicyServer.
	PolicyUniquelyReachable PolicyConditionType = "PolicyUniquelyReachable"

	// PolicyScheduled is True when a PolicyRevision was created for the
	// policy's current generation and waits to be loaded (RFC 000).
	PolicyScheduled PolicyConditionType = "Scheduled"
	// PolicyInitialized is True when the policy server leader pulled,
	// validated and precompiled the revision's module (RFC 000).
	PolicyInitialized PolicyConditionType = "Initialized"
	// PolicyReady is True when a policy server replica loaded the revision
	// and serves it. There is one Ready condition per replica, told apart
	// by their replica field (RFC 000).
	PolicyReady PolicyConditionType = "Ready"
)

// PolicyStatusCondition is one observation about a policy or a
// PolicyRevision. It has the fields of a Kubernetes condition plus replica,
// set when the observation was made by one policy server replica.
type PolicyStatusCondition struct {
	// Type of the condition, in UpperCamelCase, such as "Ready".
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	// +kubebuilder:validation:MaxLength=316
	Type PolicyConditionType `json:"type"`

	// Status of the condition: "True", "False" or "Unknown".
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`

	// ObservedGeneration is the metadata.generation of the object the
	// condition was computed from.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastTransitionTime is when the status last changed.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`

	// Reason is a machine-readable UpperCamelCase word for the last
	// transition, such as "PullError".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
	Reason string `json:"reason"`

	// Message explains the last transition to a person.
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message"`

	// Replica is the ordinal of the policy server replica that reported the
	// condition. It is unset for conditions about the whole PolicyServer.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replica *int32 `json:"replica,omitempty"`
}

// PolicyStatus is the observed state of a policy or a policy group.
type PolicyStatus struct {
	// PolicyStatus is the lifecycle phase of the policy: "unscheduled",
	// "scheduled", "pending" or "active".
	// +optional
	PolicyStatus PolicyStatusEnum `json:"policyStatus,omitempty"`

	// PolicyMode is the mode the policy is observed to run in on its
	// PolicyServer: "protect", "monitor" or "unknown".
	// +optional
	PolicyMode PolicyModeStatus `json:"mode,omitempty"`

	// Conditions are the latest observations about the policy. Conditions
	// reported by a single policy server replica carry its ordinal in
	// replica, so a type may appear once per replica.
	// +listType=atomic
	// +optional
	Conditions []PolicyStatusCondition `json:"conditions,omitempty"`
}
