# Containers must set CPU and memory limits no higher than the parameters'.
# A limit that does not parse is a violation: the units builtins are
# undefined for it.
package k8scontainerlimits

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	some resource in ["cpu", "memory"]
	not c.resources.limits[resource]
	msg := sprintf("container <%v> has no %v limit", [c.name, resource])
}

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	limit := c.resources.limits.memory
	units.parse_bytes(limit) > units.parse_bytes(input.parameters.memory)
	msg := sprintf("container <%v> memory limit <%v> is higher than the maximum allowed of <%v>", [c.name, limit, input.parameters.memory])
}

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	limit := c.resources.limits.memory
	not units.parse_bytes(limit)
	msg := sprintf("container <%v> memory limit <%v> cannot be parsed", [c.name, limit])
}

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	limit := c.resources.limits.cpu
	units.parse(limit) > units.parse(input.parameters.cpu)
	msg := sprintf("container <%v> cpu limit <%v> is higher than the maximum allowed of <%v>", [c.name, limit, input.parameters.cpu])
}
