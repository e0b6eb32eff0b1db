//go:build !linux

package policyserver

import "net"

// peerClosed reports false: only Linux is asked whether a client has closed
// its connection (gone_linux.go).
func peerClosed(*net.TCPConn) bool { return false }
