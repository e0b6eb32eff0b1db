package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SyncedAnnotation marks an object in a spoke cluster as a copy made by the
// policy syncer; its value is the name of the PolicySync that made it. An
// object without it was made in the spoke and is never changed by the
// syncer.
const SyncedAnnotation = "kubewarden.io/policy-synced"

// Condition types and reasons of a PolicySync's status.
const (
	// ConditionReady is True when every GVR is valid and every object is
	// synced to every cluster.
	ConditionReady = "Ready"

	// ReasonSynced: every object is synced to every cluster.
	ReasonSynced = "Synced"
	// ReasonSyncing: a cluster has not reported its first sync yet.
	ReasonSyncing = "Syncing"
	// ReasonInvalidGVR: an entry of spec.policiesToSync cannot be synced.
	ReasonInvalidGVR = "InvalidGVR"
	// ReasonClusterUnreachable: a cluster's API server cannot be reached,
	// or its kubeconfig Secret cannot be read.
	ReasonClusterUnreachable = "ClusterUnreachable"
	// ReasonConflict: an object made in a spoke has the kind and name of a
	// hub object, and wins.
	ReasonConflict = "Conflict"
	// ReasonSyncFailed: a spoke refused a copy (its namespace is missing,
	// its API server rejected it, ...); the object's status says why.
	ReasonSyncFailed = "SyncFailed"
)

// GroupVersionResource names a resource to sync, as RFC 002's
// policiesToSync.
type GroupVersionResource struct {
	// Group of the resource; empty for the core group.
	// +optional
	Group string `json:"group"`
	// Version of the resource.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// Resource is the plural resource name, such as
	// "clusteradmissionpolicies".
	// +kubebuilder:validation:MinLength=1
	Resource string `json:"resource"`
}

// SecretKeySelector points at one key of a Secret.
type SecretKeySelector struct {
	// Namespace of the Secret. It must be the syncer's namespace (its
	// --namespace flag); empty means that namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key holding a kubeconfig file.
	// +kubebuilder:default=kubeconfig
	// +optional
	Key string `json:"key,omitempty"`
}

// Cluster is a spoke cluster reached directly, with a kubeconfig.
type Cluster struct {
	// Name of the cluster, as the status reports it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// KubeconfigSecretRef is the Secret key holding the kubeconfig the
	// syncer uses for the cluster. The syncer re-reads it when it changes.
	KubeconfigSecretRef SecretKeySelector `json:"kubeconfigSecretRef"`
}

// Placement selects Open Cluster Management ManagedClusters: the copies for
// each of them go in a ManifestWork in the cluster's namespace on the hub.
type Placement struct {
	// ClusterNames are the ManagedClusters to sync to.
	// +optional
	ClusterNames []string `json:"clusterNames,omitempty"`
}

// StatusFeedback names a field copied back from each spoke copy into the
// PolicySync's status.
type StatusFeedback struct {
	// Name under which the value is reported in an object's feedback.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// JSONPath of the field in the spoke copy, such as
	// ".status.policyStatus" (kubectl's JSONPath syntax, braces optional).
	// +kubebuilder:validation:MinLength=1
	JSONPath string `json:"jsonPath"`
}

// PolicySyncSpec says which hub objects are copied to which clusters.
//
// +kubebuilder:validation:XValidation:rule="has(self.clusters) || has(self.placement)",message="set clusters, placement, or both"
type PolicySyncSpec struct {
	// PoliciesToSync are the resources whose objects are copied.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	PoliciesToSync []GroupVersionResource `json:"policiesToSync"`
	// Selector chooses which objects of those resources are copied; empty
	// or missing: all of them.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Clusters are the spokes reached directly with a kubeconfig.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []Cluster `json:"clusters,omitempty"`
	// Placement are the spokes reached through Open Cluster Management.
	// +optional
	Placement *Placement `json:"placement,omitempty"`
	// StatusFeedback are the fields copied back from each copy.
	// +optional
	// +listType=map
	// +listMapKey=name
	StatusFeedback []StatusFeedback `json:"statusFeedback,omitempty"`
}

// GVRStatus says whether one entry of spec.policiesToSync is synced.
type GVRStatus struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// Valid is true when the resource exists on the hub, the syncer may
	// list and watch it, and it has a policy's shape.
	Valid bool `json:"valid"`
	// Message says why the resource is not valid; empty when it is.
	Message string `json:"message"`
}

// ObjectStatus is the state of one hub object in one cluster.
type ObjectStatus struct {
	Group     string `json:"group"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// HubGeneration is the metadata.generation of the hub object that was
	// last copied.
	HubGeneration int64 `json:"hubGeneration"`
	// Synced is true when the copy in the cluster holds that generation.
	Synced bool `json:"synced"`
	// Message says why the object is not synced.
	// +optional
	Message string `json:"message,omitempty"`
	// Feedback holds the values of spec.statusFeedback read from the copy,
	// as strings (JSON for values that are not strings).
	// +optional
	Feedback map[string]string `json:"feedback,omitempty"`
}

// ConflictStatus is a hub object that was not copied because an object of
// the same kind and name was made in the cluster, which wins.
type ConflictStatus struct {
	Group     string `json:"group"`
	Resource  string `json:"resource"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Message   string `json:"message"`
}

// ClusterStatus is the state of one spoke cluster.
type ClusterStatus struct {
	// Name of the cluster: spec.clusters[].name, or the ManagedCluster's
	// name for a placement.
	Name string `json:"name"`
	// Reachable is false when the cluster's API server could not be
	// reached at the last attempt; the syncer retries with a backoff.
	Reachable bool `json:"reachable"`
	// Message says why the cluster is not reachable.
	// +optional
	Message string `json:"message,omitempty"`
	// Objects has one entry per hub object copied (or to copy) to the
	// cluster.
	// +optional
	Objects []ObjectStatus `json:"objects,omitempty"`
	// Conflicts has one entry per hub object not copied because of an
	// object made in the cluster.
	// +optional
	Conflicts []ConflictStatus `json:"conflicts,omitempty"`
}

// PolicySyncStatus is what the syncer reports.
type PolicySyncStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions holds Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// PoliciesToSync has one entry per entry of spec.policiesToSync.
	// +optional
	PoliciesToSync []GVRStatus `json:"policiesToSync,omitempty"`
	// Clusters has one entry per cluster of spec.clusters and
	// spec.placement.
	// +optional
	Clusters []ClusterStatus `json:"clusters,omitempty"`
}

// PolicySync copies policies from the hub cluster it lives in to spoke
// clusters, and reports what each spoke did with them.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=psync
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PolicySync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PolicySyncSpec   `json:"spec"`
	Status PolicySyncStatus `json:"status,omitempty"`
}

// PolicySyncList is a list of PolicySyncs.
//
// +kubebuilder:object:root=true
type PolicySyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicySync `json:"items"`
}
