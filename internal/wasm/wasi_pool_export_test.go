package wasm

// WASIPoolStats reports how many instances p has created and holds idle,
// and whether it has fallen back to fresh instances.
func WASIPoolStats(p *WASIPool) (created, idle int, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created, len(p.idle), p.fresh.Load()
}
