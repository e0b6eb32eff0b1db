// Command floorserver is the "floor" of Warden's benchmarks: the least an
// HTTPS admission webhook written in Go can do. For POST /validate/{name} it
// decodes the AdmissionReview with encoding/json, as a plain Go webhook
// would, into the fields the policy server reads, and allows it; a body that
// does not decode is answered 400. It does not use the policy server's own
// one-pass decoder, so that the floor stays the plain Go webhook it stands
// for. Measured in the same
// run as the policy server, it shows what the HTTP, TLS and JSON stack cost
// on that machine, so the policy server's figures can be read against it.
//
// It serves with the standard net/http server and its default TLS setup
// (HTTP/1.1 and HTTP/2). Without -cert-file and -key-file it generates a
// self-signed ECDSA P-256 certificate for 127.0.0.1, ::1 and localhost, valid
// for a day, and writes it to -write-ca for the client to trust (loadtest
// -cacert).
//
// It is a development tool for loopback use. It imports only the standard
// library and internal/admission's wire types; it must not import the policy
// server, which it is the baseline for.
package main
