# A RoleBinding may not bind a subject to a role that another RoleBinding of
# its namespace already binds it to: the Gatekeeper inventory
# (data.inventory) holds the RoleBindings the policy was granted as
# contextAwareResources. The benchmark of issue 21 runs it over 10,000 of
# them.
package uniquerolebinding

violation contains {"msg": msg} if {
	input.review.kind.kind == "RoleBinding"
	binding := input.review.object
	some subject in binding.subjects
	some name
	other := data.inventory.namespace[binding.metadata.namespace]["rbac.authorization.k8s.io/v1"].RoleBinding[name]
	name != binding.metadata.name
	other.roleRef.kind == binding.roleRef.kind
	other.roleRef.name == binding.roleRef.name
	some bound in other.subjects
	bound.kind == subject.kind
	bound.name == subject.name
	msg := sprintf("%v %v is bound to %v %v already, by rolebinding %v", [subject.kind, subject.name, binding.roleRef.kind, binding.roleRef.name, name])
}
