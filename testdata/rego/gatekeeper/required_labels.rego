# Objects must carry the labels the parameters list; a label that has an
# allowedRegex must match it.
package k8srequiredlabels

labels := object.get(input.review.object.metadata, "labels", {})

violation contains {"msg": msg, "details": {"missing_labels": missing}} if {
	required := {l.key | some l in input.parameters.labels}
	provided := {key | some key, _ in labels}
	missing := required - provided
	count(missing) > 0
	msg := sprintf("you must provide labels: %v", [missing])
}

violation contains {"msg": msg} if {
	some l in input.parameters.labels
	value := labels[l.key]
	object.get(l, "allowedRegex", "") != ""
	not regex.match(l.allowedRegex, value)
	msg := sprintf("label <%v: %v> does not match the allowed regex %v", [l.key, value, l.allowedRegex])
}
