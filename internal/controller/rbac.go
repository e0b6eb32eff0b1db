// Package controller holds Warden's reconcilers: one per root kind of
// policies.kubewarden.io, PolicyServer and the four policy kinds; the policy
// reconciler also writes and watches the policies' PolicyRevisions.
//
// The kubebuilder:rbac markers in rbac.go are the permissions the controller
// needs; `make generate` turns them into config/rbac/role.yaml. Add a marker
// there when a reconciler starts to read or write a new kind of object.
package controller

// Policies, policy groups, PolicyServers and PolicyRevisions, with their
// status and finalizers:
//
// +kubebuilder:rbac:groups=policies.kubewarden.io,resources=policyservers;clusteradmissionpolicies;admissionpolicies;clusteradmissionpolicygroups;admissionpolicygroups;policyrevisions,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=policies.kubewarden.io,resources=policyservers/status;clusteradmissionpolicies/status;admissionpolicies/status;clusteradmissionpolicygroups/status;admissionpolicygroups/status;policyrevisions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=policies.kubewarden.io,resources=policyservers/finalizers;clusteradmissionpolicies/finalizers;admissionpolicies/finalizers;clusteradmissionpolicygroups/finalizers;admissionpolicygroups/finalizers;policyrevisions/finalizers,verbs=update

// The webhook configurations of the policies:
//
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch;create;update;patch;delete

// The policy server workload, its Service, TLS Secrets, configuration and
// disruption budget; pods are only read, for readiness, and the claims of
// shared policy caches, to check they exist:
//
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=services;secrets;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete

// The endpoints of the controller's own webhook Service, which must have a
// ready one before the controller's webhook configurations are first
// written:
//
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Leader election and events:
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
