# Runs for as long as the cube of the number of values: with a thousand
# values, much longer than any deadline.
package loop

violation contains {"msg": "found"} if {
	values := input.review.object.spec.values
	count([1 | some a in values; some b in values; some c in values; a + b + c < 0]) > 0
}
