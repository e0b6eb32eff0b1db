package wasm

// WaitForSnapshots waits until the instances being remembered after their
// evaluation (OPA.put) are remembered and kept.
func (o *OPA) WaitForSnapshots() { o.snapshotting.Wait() }

// SnapshotDataID is the ID of the document of the snapshot, 0 without one.
func (o *OPA) SnapshotDataID() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.snap == nil {
		return 0
	}
	return o.snap.dataID
}

// IdleOnSnapshot counts the idle instances, and those of them whose memory
// maps the snapshot.
func (o *OPA) IdleOnSnapshot() (onSnapshot, idle int) {
	o.mu.Lock()
	snap := o.snap
	o.mu.Unlock()
	o.idle.mu.Lock()
	defer o.idle.mu.Unlock()
	for _, in := range o.idle.items {
		if snap != nil && in.mem.snap == snap.mem {
			onSnapshot++
		}
	}
	return onSnapshot, len(o.idle.items)
}
