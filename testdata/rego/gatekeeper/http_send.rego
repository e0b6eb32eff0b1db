# Asks a remote service about every image: http.send is refused in an
# admission webhook.
package httpsend

violation contains {"msg": msg} if {
	some c in input.review.object.spec.containers
	resp := http.send({"method": "GET", "url": sprintf("https://images.example/allowed?image=%v", [c.image])})
	resp.status_code != 200
	msg := sprintf("image %v is not allowed", [c.image])
}
