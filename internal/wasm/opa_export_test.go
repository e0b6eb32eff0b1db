package wasm

// WaitForSnapshots waits until the instances being remembered after their
// evaluation (OPA.put) are remembered and kept.
func (o *OPA) WaitForSnapshots() { o.snaps.remembering.Wait() }

// SnapshotDataID is the ID of the document of the snapshot, 0 without one.
func (o *OPA) SnapshotDataID() uint64 {
	if s := o.snaps.current(); s != nil {
		return s.dataID
	}
	return 0
}

// current returns the snapshot, of whichever document, or nil.
func (s *opaSnapshots) current() *opaSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// IdleOnSnapshot counts the idle instances, and those of them whose memory
// maps the snapshot.
func (o *OPA) IdleOnSnapshot() (onSnapshot, idle int) {
	snap := o.snaps.current()
	o.idle.mu.Lock()
	defer o.idle.mu.Unlock()
	for _, in := range o.idle.items {
		if snap != nil && in.mem.snap == snap.mem {
			onSnapshot++
		}
	}
	return onSnapshot, len(o.idle.items)
}
