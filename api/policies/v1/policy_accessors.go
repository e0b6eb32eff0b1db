package v1

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Accessors of ClusterAdmissionPolicy, making it a Policy.

// GetUniqueName implements Policy.
func (p *ClusterAdmissionPolicy) GetUniqueName() string {
	return ClusterPolicyUniqueName(p.Name)
}

// GetPolicyServer implements Policy.
func (p *ClusterAdmissionPolicy) GetPolicyServer() string {
	return p.Spec.PolicyServer
}

// GetPolicyMode implements Policy.
func (p *ClusterAdmissionPolicy) GetPolicyMode() PolicyMode {
	return policyModeOrDefault(p.Spec.Mode)
}

// GetModule implements Policy.
func (p *ClusterAdmissionPolicy) GetModule() string {
	return p.Spec.Module
}

// GetSettings implements Policy.
func (p *ClusterAdmissionPolicy) GetSettings() runtime.RawExtension {
	return p.Spec.Settings
}

// GetRules implements Policy.
func (p *ClusterAdmissionPolicy) GetRules() []admissionregistrationv1.RuleWithOperations {
	return p.Spec.Rules
}

// GetFailurePolicy implements Policy.
func (p *ClusterAdmissionPolicy) GetFailurePolicy() *admissionregistrationv1.FailurePolicyType {
	return p.Spec.FailurePolicy
}

// GetMatchPolicy implements Policy.
func (p *ClusterAdmissionPolicy) GetMatchPolicy() *admissionregistrationv1.MatchPolicyType {
	return p.Spec.MatchPolicy
}

// GetMatchConditions implements Policy.
func (p *ClusterAdmissionPolicy) GetMatchConditions() []admissionregistrationv1.MatchCondition {
	return p.Spec.MatchConditions
}

// GetSideEffects implements Policy.
func (p *ClusterAdmissionPolicy) GetSideEffects() *admissionregistrationv1.SideEffectClass {
	return p.Spec.SideEffects
}

// GetObjectSelector implements Policy.
func (p *ClusterAdmissionPolicy) GetObjectSelector() *metav1.LabelSelector {
	return p.Spec.ObjectSelector
}

// GetNamespaceSelector implements Policy.
func (p *ClusterAdmissionPolicy) GetNamespaceSelector() *metav1.LabelSelector {
	return p.Spec.NamespaceSelector
}

// GetAllowInsideAdmissionControllerNamespace implements Policy.
func (p *ClusterAdmissionPolicy) GetAllowInsideAdmissionControllerNamespace() bool {
	return p.Spec.AllowInsideAdmissionControllerNamespace
}

// GetTimeoutSeconds implements Policy.
func (p *ClusterAdmissionPolicy) GetTimeoutSeconds() *int32 {
	return p.Spec.TimeoutSeconds
}

// GetTimeoutEvalSeconds implements Policy.
func (p *ClusterAdmissionPolicy) GetTimeoutEvalSeconds() *int32 {
	return p.Spec.TimeoutEvalSeconds
}

// GetMessage implements Policy.
func (p *ClusterAdmissionPolicy) GetMessage() string {
	return p.Spec.Message
}

// GetBackgroundAudit implements Policy.
func (p *ClusterAdmissionPolicy) GetBackgroundAudit() bool {
	return p.Spec.BackgroundAudit
}

// IsMutating implements Policy.
func (p *ClusterAdmissionPolicy) IsMutating() bool {
	return p.Spec.Mutating
}

// IsContextAware implements Policy.
func (p *ClusterAdmissionPolicy) IsContextAware() bool {
	return len(p.Spec.ContextAwareResources) > 0
}

// GetContextAwareResources implements Policy.
func (p *ClusterAdmissionPolicy) GetContextAwareResources() []ContextAwareResource {
	return p.Spec.ContextAwareResources
}

// GetSeverity implements Policy.
func (p *ClusterAdmissionPolicy) GetSeverity() (string, bool) {
	return annotation(p, AnnotationSeverity)
}

// GetCategory implements Policy.
func (p *ClusterAdmissionPolicy) GetCategory() (string, bool) {
	return annotation(p, AnnotationCategory)
}

// GetTitle implements Policy.
func (p *ClusterAdmissionPolicy) GetTitle() (string, bool) {
	return annotation(p, AnnotationTitle)
}

// GetDescription implements Policy.
func (p *ClusterAdmissionPolicy) GetDescription() (string, bool) {
	return annotation(p, AnnotationDescription)
}

// GetStatus implements Policy.
func (p *ClusterAdmissionPolicy) GetStatus() *PolicyStatus {
	return &p.Status
}

// SetPolicyServer implements Policy.
func (p *ClusterAdmissionPolicy) SetPolicyServer(name string) {
	p.Spec.PolicyServer = name
}

// SetStatus implements Policy.
func (p *ClusterAdmissionPolicy) SetStatus(status PolicyStatusEnum) {
	p.Status.PolicyStatus = status
}

// SetPolicyModeStatus implements Policy.
func (p *ClusterAdmissionPolicy) SetPolicyModeStatus(mode PolicyModeStatus) {
	p.Status.PolicyMode = mode
}

// DeepCopyPolicy implements Policy.
func (p *ClusterAdmissionPolicy) DeepCopyPolicy() Policy {
	return p.DeepCopy()
}

// Accessors of AdmissionPolicy, making it a Policy.

// GetUniqueName implements Policy.
func (p *AdmissionPolicy) GetUniqueName() string {
	return NamespacedPolicyUniqueName(p.Namespace, p.Name)
}

// GetPolicyServer implements Policy.
func (p *AdmissionPolicy) GetPolicyServer() string {
	return p.Spec.PolicyServer
}

// GetPolicyMode implements Policy.
func (p *AdmissionPolicy) GetPolicyMode() PolicyMode {
	return policyModeOrDefault(p.Spec.Mode)
}

// GetModule implements Policy.
func (p *AdmissionPolicy) GetModule() string {
	return p.Spec.Module
}

// GetSettings implements Policy.
func (p *AdmissionPolicy) GetSettings() runtime.RawExtension {
	return p.Spec.Settings
}

// GetRules implements Policy.
func (p *AdmissionPolicy) GetRules() []admissionregistrationv1.RuleWithOperations {
	return namespacedRules(p.Spec.Rules)
}

// GetFailurePolicy implements Policy.
func (p *AdmissionPolicy) GetFailurePolicy() *admissionregistrationv1.FailurePolicyType {
	return p.Spec.FailurePolicy
}

// GetMatchPolicy implements Policy.
func (p *AdmissionPolicy) GetMatchPolicy() *admissionregistrationv1.MatchPolicyType {
	return p.Spec.MatchPolicy
}

// GetMatchConditions implements Policy.
func (p *AdmissionPolicy) GetMatchConditions() []admissionregistrationv1.MatchCondition {
	return p.Spec.MatchConditions
}

// GetSideEffects implements Policy.
func (p *AdmissionPolicy) GetSideEffects() *admissionregistrationv1.SideEffectClass {
	return p.Spec.SideEffects
}

// GetObjectSelector implements Policy.
func (p *AdmissionPolicy) GetObjectSelector() *metav1.LabelSelector {
	return p.Spec.ObjectSelector
}

// GetNamespaceSelector implements Policy.
func (p *AdmissionPolicy) GetNamespaceSelector() *metav1.LabelSelector {
	return namespaceSelectorFor(p.Namespace)
}

// GetAllowInsideAdmissionControllerNamespace implements Policy.
func (p *AdmissionPolicy) GetAllowInsideAdmissionControllerNamespace() bool {
	return false
}

// GetTimeoutSeconds implements Policy.
func (p *AdmissionPolicy) GetTimeoutSeconds() *int32 {
	return p.Spec.TimeoutSeconds
}

// GetTimeoutEvalSeconds implements Policy.
func (p *AdmissionPolicy) GetTimeoutEvalSeconds() *int32 {
	return p.Spec.TimeoutEvalSeconds
}

// GetMessage implements Policy.
func (p *AdmissionPolicy) GetMessage() string {
	return p.Spec.Message
}

// GetBackgroundAudit implements Policy.
func (p *AdmissionPolicy) GetBackgroundAudit() bool {
	return p.Spec.BackgroundAudit
}

// IsMutating implements Policy.
func (p *AdmissionPolicy) IsMutating() bool {
	return p.Spec.Mutating
}

// IsContextAware implements Policy.
func (p *AdmissionPolicy) IsContextAware() bool {
	return false
}

// GetContextAwareResources implements Policy.
func (p *AdmissionPolicy) GetContextAwareResources() []ContextAwareResource {
	return []ContextAwareResource{}
}

// GetSeverity implements Policy.
func (p *AdmissionPolicy) GetSeverity() (string, bool) {
	return annotation(p, AnnotationSeverity)
}

// GetCategory implements Policy.
func (p *AdmissionPolicy) GetCategory() (string, bool) {
	return annotation(p, AnnotationCategory)
}

// GetTitle implements Policy.
func (p *AdmissionPolicy) GetTitle() (string, bool) {
	return annotation(p, AnnotationTitle)
}

// GetDescription implements Policy.
func (p *AdmissionPolicy) GetDescription() (string, bool) {
	return annotation(p, AnnotationDescription)
}

// GetStatus implements Policy.
func (p *AdmissionPolicy) GetStatus() *PolicyStatus {
	return &p.Status
}

// SetPolicyServer implements Policy.
func (p *AdmissionPolicy) SetPolicyServer(name string) {
	p.Spec.PolicyServer = name
}

// SetStatus implements Policy.
func (p *AdmissionPolicy) SetStatus(status PolicyStatusEnum) {
	p.Status.PolicyStatus = status
}

// SetPolicyModeStatus implements Policy.
func (p *AdmissionPolicy) SetPolicyModeStatus(mode PolicyModeStatus) {
	p.Status.PolicyMode = mode
}

// DeepCopyPolicy implements Policy.
func (p *AdmissionPolicy) DeepCopyPolicy() Policy {
	return p.DeepCopy()
}

// Accessors of ClusterAdmissionPolicyGroup, making it a PolicyGroup.

// GetUniqueName implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetUniqueName() string {
	return ClusterPolicyGroupUniqueName(p.Name)
}

// GetPolicyServer implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetPolicyServer() string {
	return p.Spec.PolicyServer
}

// GetPolicyMode implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetPolicyMode() PolicyMode {
	return policyModeOrDefault(p.Spec.Mode)
}

// GetModule implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetModule() string {
	return ""
}

// GetSettings implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetSettings() runtime.RawExtension {
	return runtime.RawExtension{}
}

// GetRules implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetRules() []admissionregistrationv1.RuleWithOperations {
	return p.Spec.Rules
}

// GetFailurePolicy implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetFailurePolicy() *admissionregistrationv1.FailurePolicyType {
	return p.Spec.FailurePolicy
}

// GetMatchPolicy implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetMatchPolicy() *admissionregistrationv1.MatchPolicyType {
	return p.Spec.MatchPolicy
}

// GetMatchConditions implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetMatchConditions() []admissionregistrationv1.MatchCondition {
	return p.Spec.MatchConditions
}

// GetSideEffects implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetSideEffects() *admissionregistrationv1.SideEffectClass {
	return p.Spec.SideEffects
}

// GetObjectSelector implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetObjectSelector() *metav1.LabelSelector {
	return p.Spec.ObjectSelector
}

// GetNamespaceSelector implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetNamespaceSelector() *metav1.LabelSelector {
	return p.Spec.NamespaceSelector
}

// GetAllowInsideAdmissionControllerNamespace implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetAllowInsideAdmissionControllerNamespace() bool {
	return p.Spec.AllowInsideAdmissionControllerNamespace
}

// GetTimeoutSeconds implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetTimeoutSeconds() *int32 {
	return p.Spec.TimeoutSeconds
}

// GetTimeoutEvalSeconds implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetTimeoutEvalSeconds() *int32 {
	return nil
}

// GetMessage implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetMessage() string {
	return p.Spec.Message
}

// GetBackgroundAudit implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetBackgroundAudit() bool {
	return p.Spec.BackgroundAudit
}

// IsMutating implements Policy.
func (p *ClusterAdmissionPolicyGroup) IsMutating() bool {
	return false
}

// IsContextAware implements Policy.
func (p *ClusterAdmissionPolicyGroup) IsContextAware() bool {
	for _, member := range p.Spec.Policies {
		if len(member.ContextAwareResources) > 0 {
			return true
		}
	}
	return false
}

// GetContextAwareResources implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetContextAwareResources() []ContextAwareResource {
	return []ContextAwareResource{}
}

// GetSeverity implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetSeverity() (string, bool) {
	return annotation(p, AnnotationSeverity)
}

// GetCategory implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetCategory() (string, bool) {
	return annotation(p, AnnotationCategory)
}

// GetTitle implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetTitle() (string, bool) {
	return annotation(p, AnnotationTitle)
}

// GetDescription implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetDescription() (string, bool) {
	return annotation(p, AnnotationDescription)
}

// GetStatus implements Policy.
func (p *ClusterAdmissionPolicyGroup) GetStatus() *PolicyStatus {
	return &p.Status
}

// SetPolicyServer implements Policy.
func (p *ClusterAdmissionPolicyGroup) SetPolicyServer(name string) {
	p.Spec.PolicyServer = name
}

// SetStatus implements Policy.
func (p *ClusterAdmissionPolicyGroup) SetStatus(status PolicyStatusEnum) {
	p.Status.PolicyStatus = status
}

// SetPolicyModeStatus implements Policy.
func (p *ClusterAdmissionPolicyGroup) SetPolicyModeStatus(mode PolicyModeStatus) {
	p.Status.PolicyMode = mode
}

// DeepCopyPolicy implements Policy.
func (p *ClusterAdmissionPolicyGroup) DeepCopyPolicy() Policy {
	return p.DeepCopy()
}

// GetExpression implements PolicyGroup.
func (p *ClusterAdmissionPolicyGroup) GetExpression() string {
	return p.Spec.Expression
}

// GetPolicyGroupMembersWithContext implements PolicyGroup.
func (p *ClusterAdmissionPolicyGroup) GetPolicyGroupMembersWithContext() PolicyGroupMembersWithContext {
	return p.Spec.Policies
}

// Accessors of AdmissionPolicyGroup, making it a PolicyGroup.

// GetUniqueName implements Policy.
func (p *AdmissionPolicyGroup) GetUniqueName() string {
	return NamespacedPolicyGroupUniqueName(p.Namespace, p.Name)
}

// GetPolicyServer implements Policy.
func (p *AdmissionPolicyGroup) GetPolicyServer() string {
	return p.Spec.PolicyServer
}

// GetPolicyMode implements Policy.
func (p *AdmissionPolicyGroup) GetPolicyMode() PolicyMode {
	return policyModeOrDefault(p.Spec.Mode)
}

// GetModule implements Policy.
func (p *AdmissionPolicyGroup) GetModule() string {
	return ""
}

// GetSettings implements Policy.
func (p *AdmissionPolicyGroup) GetSettings() runtime.RawExtension {
	return runtime.RawExtension{}
}

// GetRules implements Policy.
func (p *AdmissionPolicyGroup) GetRules() []admissionregistrationv1.RuleWithOperations {
	return namespacedRules(p.Spec.Rules)
}

// GetFailurePolicy implements Policy.
func (p *AdmissionPolicyGroup) GetFailurePolicy() *admissionregistrationv1.FailurePolicyType {
	return p.Spec.FailurePolicy
}

// GetMatchPolicy implements Policy.
func (p *AdmissionPolicyGroup) GetMatchPolicy() *admissionregistrationv1.MatchPolicyType {
	return p.Spec.MatchPolicy
}

// GetMatchConditions implements Policy.
func (p *AdmissionPolicyGroup) GetMatchConditions() []admissionregistrationv1.MatchCondition {
	return p.Spec.MatchConditions
}

// GetSideEffects implements Policy.
func (p *AdmissionPolicyGroup) GetSideEffects() *admissionregistrationv1.SideEffectClass {
	return p.Spec.SideEffects
}

// GetObjectSelector implements Policy.
func (p *AdmissionPolicyGroup) GetObjectSelector() *metav1.LabelSelector {
	return p.Spec.ObjectSelector
}

// GetNamespaceSelector implements Policy.
func (p *AdmissionPolicyGroup) GetNamespaceSelector() *metav1.LabelSelector {
	return namespaceSelectorFor(p.Namespace)
}

// GetAllowInsideAdmissionControllerNamespace implements Policy.
func (p *AdmissionPolicyGroup) GetAllowInsideAdmissionControllerNamespace() bool {
	return false
}

// GetTimeoutSeconds implements Policy.
func (p *AdmissionPolicyGroup) GetTimeoutSeconds() *int32 {
	return p.Spec.TimeoutSeconds
}

// GetTimeoutEvalSeconds implements Policy.
func (p *AdmissionPolicyGroup) GetTimeoutEvalSeconds() *int32 {
	return nil
}

// GetMessage implements Policy.
func (p *AdmissionPolicyGroup) GetMessage() string {
	return p.Spec.Message
}

// GetBackgroundAudit implements Policy.
func (p *AdmissionPolicyGroup) GetBackgroundAudit() bool {
	return p.Spec.BackgroundAudit
}

// IsMutating implements Policy.
func (p *AdmissionPolicyGroup) IsMutating() bool {
	return false
}

// IsContextAware implements Policy.
func (p *AdmissionPolicyGroup) IsContextAware() bool {
	return false
}

// GetContextAwareResources implements Policy.
func (p *AdmissionPolicyGroup) GetContextAwareResources() []ContextAwareResource {
	return []ContextAwareResource{}
}

// GetSeverity implements Policy.
func (p *AdmissionPolicyGroup) GetSeverity() (string, bool) {
	return annotation(p, AnnotationSeverity)
}

// GetCategory implements Policy.
func (p *AdmissionPolicyGroup) GetCategory() (string, bool) {
	return annotation(p, AnnotationCategory)
}

// GetTitle implements Policy.
func (p *AdmissionPolicyGroup) GetTitle() (string, bool) {
	return annotation(p, AnnotationTitle)
}

// GetDescription implements Policy.
func (p *AdmissionPolicyGroup) GetDescription() (string, bool) {
	return annotation(p, AnnotationDescription)
}

// GetStatus implements Policy.
func (p *AdmissionPolicyGroup) GetStatus() *PolicyStatus {
	return &p.Status
}

// SetPolicyServer implements Policy.
func (p *AdmissionPolicyGroup) SetPolicyServer(name string) {
	p.Spec.PolicyServer = name
}

// SetStatus implements Policy.
func (p *AdmissionPolicyGroup) SetStatus(status PolicyStatusEnum) {
	p.Status.PolicyStatus = status
}

// SetPolicyModeStatus implements Policy.
func (p *AdmissionPolicyGroup) SetPolicyModeStatus(mode PolicyModeStatus) {
	p.Status.PolicyMode = mode
}

// DeepCopyPolicy implements Policy.
func (p *AdmissionPolicyGroup) DeepCopyPolicy() Policy {
	return p.DeepCopy()
}

// GetExpression implements PolicyGroup.
func (p *AdmissionPolicyGroup) GetExpression() string {
	return p.Spec.Expression
}

// GetPolicyGroupMembersWithContext implements PolicyGroup.
func (p *AdmissionPolicyGroup) GetPolicyGroupMembersWithContext() PolicyGroupMembersWithContext {
	members := make(PolicyGroupMembersWithContext, len(p.Spec.Policies))
	for name, member := range p.Spec.Policies {
		members[name] = PolicyGroupMemberWithContext{PolicyGroupMember: member}
	}
	return members
}
