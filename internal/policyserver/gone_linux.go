package policyserver

import (
	"net"

	"golang.org/x/sys/unix"
)

// The TCP states (linux/tcp_states.h) of a connection whose peer has closed
// its side: it sent a FIN (CLOSE_WAIT; LAST_ACK once we closed ours too) or
// a RST (CLOSE).
const (
	tcpClose     = 7
	tcpCloseWait = 8
	tcpLastAck   = 9
)

// peerClosed reports whether the peer of c has closed its side of the
// connection, whatever c still has to read. It reports false when it
// cannot tell.
func peerClosed(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var state uint8
	err = raw.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			state = info.State
		}
	})
	if err != nil {
		return false
	}
	return state == tcpClose || state == tcpCloseWait || state == tcpLastAck
}
