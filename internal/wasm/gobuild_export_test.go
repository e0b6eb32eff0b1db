package wasm

// GuestEnv returns the environment of m's instances.
func GuestEnv(m *Module) []string { return m.env }

// DropGuestEnv empties the environment of m's instances, so that a test can
// run a module built without write barriers as Warden did before
// gobuild.go. m must be a module no other test uses.
func DropGuestEnv(m *Module) { m.env = nil }
