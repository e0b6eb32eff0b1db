# A violation whose msg is not a string: Kubewarden cannot read the result,
# and accepts the request.
package unparsable

violation contains {"msg": count(input.review.object.spec.containers)} if {
	count(input.review.object.spec.containers) > 0
}
