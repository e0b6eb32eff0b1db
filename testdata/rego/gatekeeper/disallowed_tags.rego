# Container images must name a tag, and not one of the tags the parameters
# disallow, unless they start with an exempt prefix.
package k8sdisallowedtags

containers contains c if some c in input.review.object.spec.containers

containers contains c if some c in input.review.object.spec.initContainers

exempt(image) if {
	some prefix in object.get(input.parameters, "exemptImages", [])
	startswith(image, prefix)
}

tag(image) := t if {
	parts := split(image, "/")
	name := parts[count(parts) - 1]
	contains(name, ":")
	t := split(name, ":")[1]
}

violation contains {"msg": msg} if {
	some c in containers
	not exempt(c.image)
	t := tag(c.image)
	t in input.parameters.tags
	msg := sprintf("container <%v> uses a disallowed tag <%v>; disallowed tags are %v", [c.name, c.image, input.parameters.tags])
}

violation contains {"msg": msg} if {
	some c in containers
	not exempt(c.image)
	not tag(c.image)
	msg := sprintf("container <%v> does not name an image tag <%v>", [c.name, c.image])
}
