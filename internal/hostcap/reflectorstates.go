package hostcap

import "github.com/wardenhq/warden/internal/reflector"

// ReflectorStates returns the state of every reflector that runs, for the
// metrics (reflector.Reflectors.States); nil without a Store.
func (k *Kubernetes) ReflectorStates() []reflector.State {
	if k.reflectors == nil {
		return nil
	}
	return k.reflectors.States()
}
