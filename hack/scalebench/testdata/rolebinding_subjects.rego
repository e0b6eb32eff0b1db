# A subject may be bound by at most parameters.max_bindings RoleBindings of
# the whole cluster, and the inventory must hold at least
# parameters.min_bindings of them (so that a partial inventory is an error
# the benchmark sees). It walks every RoleBinding of data.inventory.
package rolebindingsubjects

bindings := [binding |
	some namespace, name
	binding := data.inventory.namespace[namespace]["rbac.authorization.k8s.io/v1"].RoleBinding[name]
]

violation contains {"msg": msg} if {
	count(bindings) < input.parameters.min_bindings
	msg := sprintf("the inventory holds %v RoleBindings, want at least %v", [count(bindings), input.parameters.min_bindings])
}

violation contains {"msg": msg} if {
	input.review.kind.kind == "RoleBinding"
	some subject in input.review.object.subjects
	n := count([1 |
		some binding in bindings
		some granted in binding.subjects
		granted.kind == subject.kind
		granted.name == subject.name
	])
	n >= input.parameters.max_bindings
	msg := sprintf("%v %v is bound by %v RoleBindings already, at most %v are allowed", [subject.kind, subject.name, n, input.parameters.max_bindings])
}
