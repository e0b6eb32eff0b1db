# A RoleBinding may not grant a subject a role that another RoleBinding of
# its namespace grants it already. It reads the bindings of one namespace of
# data.inventory (the Gatekeeper inventory of the policy's
# contextAwareResources), so its cost is mostly the inventory's plumbing.
package rolebindingduplicate

violation contains {"msg": msg} if {
	input.review.kind.kind == "RoleBinding"
	binding := input.review.object
	some name
	other := data.inventory.namespace[binding.metadata.namespace]["rbac.authorization.k8s.io/v1"].RoleBinding[name]
	name != binding.metadata.name
	other.roleRef.kind == binding.roleRef.kind
	other.roleRef.name == binding.roleRef.name
	some subject in binding.subjects
	some granted in other.subjects
	granted.kind == subject.kind
	granted.name == subject.name
	msg := sprintf("%v %v has %v %v already through RoleBinding %v", [subject.kind, subject.name, binding.roleRef.kind, binding.roleRef.name, name])
}
