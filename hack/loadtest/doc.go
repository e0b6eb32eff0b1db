// Command loadtest is the HTTP load generator behind Warden's published
// benchmarks. It POSTs one fixed body (normally an AdmissionReview, see
// testdata/pod-review.json) to one URL and reports throughput, errors and
// latency percentiles.
//
// It is a development tool meant for loopback targets (a policy server or the
// floor server in hack/floorserver on 127.0.0.1). It refuses no target, but
// nothing in it is hardened for use against remote or shared systems.
//
// Two modes:
//
//   - Closed loop (default): -c workers each send requests back to back over
//     their own keep-alive connection. This measures the highest request rate
//     the target sustains at that concurrency.
//   - Open loop (-rate R): requests are scheduled at a fixed rate R, whatever
//     the target does, with at most -c in flight (default 64). Latency is
//     measured from the time each request was scheduled to be sent, not from
//     the time it was actually sent, so a slow target cannot hide its stalls by
//     holding the load tool back ("coordinated omission"). Requests that left
//     more than 1ms behind schedule are reported as late, scheduled requests
//     that could not be sent before the end of the run as not sent, and the
//     service time (from the actual send) is reported next to the corrected
//     latency.
//
// In open loop the workers take turns sleeping until the next request is due
// and then send it themselves, so nothing but the wake-up stands between the
// schedule and the send. On Linux they sleep with nanosleep(2) and a 1ns
// timer slack: Go timers wake an idle process on millisecond boundaries only,
// which would add up to 1ms to every latency at low rates. Elsewhere they use
// time.Sleep; check the send lag loadtest reports.
//
// The client is HTTP/1.1 only (HTTP/2 is disabled on the transport), with one
// shared keep-alive transport whose idle pool holds a connection per worker.
// Response bodies are read in full so connections are reused. Latency
// percentiles come from a log-linear histogram with a relative error below
// 0.4%; only successful requests are recorded in it. Requests sent during
// -warmup are not counted.
//
// Exit status: 0 when every measured request succeeded, 1 when some failed or
// none was measured, 2 for invalid flags or files.
//
// The package must not import Warden's policy server packages: it measures
// them from the outside.
package main
