//go:build !linux

package main

// exitWithParent does nothing outside Linux: there, stopping go run by its
// PID leaves the runner running; stop the runner itself (Ctrl-C, or kill
// the process listening on the port).
func exitWithParent() error { return nil }
