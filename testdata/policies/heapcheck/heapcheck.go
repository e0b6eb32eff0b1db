// Package heapcheck churns a pointer-rich heap and checks it, for the test
// policies built without write barriers (nowb, wasi-nowb): it allocates
// enough for Go's collector to run several cycles during one call, and moves
// pointers between objects while it runs, the pattern a missing write
// barrier turns into freed live objects. Corruption shows as a wrong answer
// from Check or as a trap.
package heapcheck

import (
	"fmt"
	"strconv"
)

// node is referenced from exactly one place: a slot of the roots, or the
// next field of a node held by a slot.
type node struct {
	next    *node
	payload []uint64 // payload[k] == mix(id*payloadLen + k)
	id      uint64
	seen    uint64 // the last walk that reached the node
}

const (
	slots      = 4096
	payloadLen = 4
	junkRing   = 64
)

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func newNode(id uint64) *node {
	n := &node{id: id, payload: make([]uint64, payloadLen)}
	for k := range n.payload {
		n.payload[k] = mix(id*payloadLen + uint64(k))
	}
	return n
}

// Check runs steps steps of churn and checks every live object, and
// returns a summary that depends only on steps: "steps S live L sum X".
func Check(steps int) (string, error) {
	roots := make([]*node, slots)
	junk := make([][]*node, junkRing)
	var live, sum uint64
	var walks uint64
	rng := uint64(steps)
	for i := 1; i <= steps; i++ {
		rng = mix(rng)
		a, b := rng%slots, (rng>>20)%slots
		n := newNode(uint64(i))
		// Move x from a slot into the new node and drop what x held: x
		// is then reachable only through n, whatever the collector has
		// scanned so far.
		x := roots[a]
		if x != nil && x.next != nil {
			live--
			sum -= x.next.id
			x.next = nil
		}
		n.next = x
		roots[a] = roots[b]
		roots[b] = n
		live++
		sum += n.id
		// Short-lived garbage that holds pointers.
		g := make([]*node, 1+rng>>40%48)
		for k := range g {
			g[k] = &node{id: uint64(k)}
		}
		junk[i%junkRing] = g
		if i%(steps/8+1) == 0 || i == steps {
			walks++
			if err := walk(roots, walks, live, sum); err != nil {
				return "", fmt.Errorf("after step %d: %w", i, err)
			}
		}
	}
	return "steps " + strconv.Itoa(steps) + " live " + strconv.FormatUint(live, 10) + " sum " + strconv.FormatUint(sum, 10), nil
}

// walk checks that the roots reach exactly live nodes whose ids add up to
// sum, each once and with its payload intact.
func walk(roots []*node, mark, live, sum uint64) error {
	var n, s uint64
	check := func(x *node) error {
		if x.seen == mark {
			return fmt.Errorf("node %d is reachable twice", x.id)
		}
		x.seen = mark
		if len(x.payload) != payloadLen {
			return fmt.Errorf("node %d has %d payload words", x.id, len(x.payload))
		}
		for k, v := range x.payload {
			if v != mix(x.id*payloadLen+uint64(k)) {
				return fmt.Errorf("node %d payload word %d is %#x", x.id, k, v)
			}
		}
		n++
		s += x.id
		return nil
	}
	for _, r := range roots {
		if r == nil {
			continue
		}
		if err := check(r); err != nil {
			return err
		}
		if r.next != nil {
			if r.next.next != nil {
				return fmt.Errorf("node %d holds a chain", r.id)
			}
			if err := check(r.next); err != nil {
				return err
			}
		}
	}
	if n != live || s != sum {
		return fmt.Errorf("%d live nodes with id sum %d, want %d with %d", n, s, live, sum)
	}
	return nil
}
