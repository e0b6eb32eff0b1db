// Package policybuild compiles Warden's test policies, plain Go programs under
// testdata/policies, into annotated wasm modules: it runs the Go toolchain for
// GOOS=wasip1 GOARCH=wasm (a c-shared reactor for kubewarden-wapc policies, a
// command for wasi policies), embeds the policy's metadata.yml as the
// io.kubewarden.metadata section, and keeps the result in an on-disk cache
// keyed by everything the build reads.
//
// It exists for tests and benchmarks (ForTest) and for tools that need the
// test policies as files. It imports only internal/metadata from Warden and
// must not import the engine, the server or wazero; production code must not
// import it, since it shells out to the go command and links package testing.
package policybuild
