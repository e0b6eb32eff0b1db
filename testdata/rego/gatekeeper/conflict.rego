# Two definitions of one complete rule that can both hold: three replicas
# are both small and odd, a conflict that stops the evaluation.
package conflict

default size := "unknown"

size := "small" if input.review.object.spec.replicas < 10

size := "odd" if input.review.object.spec.replicas % 2 == 1

violation contains {"msg": sprintf("replicas are %v", [size])} if size != "small"
