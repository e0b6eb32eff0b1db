// Package wasm runs policy modules on wazero: it compiles each distinct module
// once, creates isolated instances, and implements the guest ABIs Kubewarden
// policies use (waPC, the WASI command contract and OPA's wasm ABI, opa.go)
// plus the host side of their host calls.
//
// It is the only package of Warden that imports wazero. It knows nothing of
// admission semantics: callers hand it bytes and get bytes back. It must not
// import any other Warden package but internal/sharedcache, the signed store
// of compiled code the replicas share.
//
// # Isolation and speed
//
// Kubewarden creates a fresh instance for every evaluation. Warden gives the
// same guarantee more cheaply: after a waPC module has been instantiated and
// initialised once, its linear memory is saved in a memfd and every pooled
// instance maps it copy-on-write. After each call the instance is put back into
// exactly the saved state: the pages the call wrote are copied back from the
// snapshot (the kernel's page map says which ones), and every mutable global is
// restored (the module is rewritten at load time to export them). Memory a
// call grew is emptied, and kept within a bound (idle.go). A call that traps
// or times out is put back the same way, with a fresh function to call
// (Wapc.putFailed); one that exits discards its instance. See
// snapshot_linux.go.
//
// WASI commands get the same treatment mid-run (wasi_pool.go): each pooled
// instance runs _start once; at its first read of stdin the call stack, memory
// and globals are saved, and every request resumes the guest inside that read
// from the saved state. OPA modules reset their heap pointer before every
// evaluation, as OPA's own SDKs do, to the mark after their data, which one
// instance parses once per version of it; the others map a snapshot of that
// instance copy-on-write (opa.go).
//
// # Go modules built without write barriers
//
// Kubewarden's cel-policy, and any Go policy built with -gcflags=-wb=false,
// corrupts its own heap whenever Go's concurrent collector marks while the
// program runs, on any host and in fresh instances too. Compile recognises
// such modules by the build settings the go command records in them, and
// their instances run with GODEBUG=gcstoptheworld=1, which makes every mark
// phase stop the program: they then compute what the same program built
// with write barriers computes (gobuild.go).
//
// # Memory
//
// What an idle server keeps resident is mostly what its modules need to
// run. wazero's machine code is moved into unlinked file mappings, demand
// paged like a shared library's text (codemap_linux.go); after policies are
// loaded, Runtime.ReleaseCode drops the pages of that code and of the
// server's own binary that only start-up ran (selfmap_linux.go). Compiled
// modules keep no wasm function bodies, which only compiling reads
// (bodies.go), and a failed call asks the Go runtime to give its memory
// back (giveback.go).
//
// # Limits
//
// Every guest call runs with a deadline: modules are rewritten to check an
// interrupt flag at function entries and, every 4096 iterations, at loop heads,
// where they also yield to Go's scheduler so that a looping guest cannot stall
// a garbage collection (interrupt.go). Every instance's memory is capped by
// Config.MemoryLimitBytes.
package wasm
