# An Ingress may not claim a host another Ingress of the cluster has: the
# Gatekeeper inventory (data.inventory) holds the Ingresses the policy was
# granted as contextAwareResources.
package uniqueingresshost

violation contains {"msg": msg} if {
	input.review.kind.kind == "Ingress"
	some rule in input.review.object.spec.rules
	some namespace, name
	other := data.inventory.namespace[namespace]["networking.k8s.io/v1"].Ingress[name]
	some taken in other.spec.rules
	taken.host == rule.host
	not same_ingress(namespace, name)
	msg := sprintf("host <%v> is taken by ingress %v/%v", [rule.host, namespace, name])
}

same_ingress(namespace, name) if {
	namespace == input.review.object.metadata.namespace
	name == input.review.object.metadata.name
}
