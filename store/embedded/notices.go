package embedded

import "github.com/idemgate/idemgate/store"

var _ store.Notifier = (*Engine)(nil)

// Notices returns the engine's notices: its own completions, releases and
// holds, delivered in process (one engine serves one gateway).
func (e *Engine) Notices() store.Notices { return &e.notices }

// settled returns what notifies the waiters of id once a fenced state
// change that leaves the in-flight state is on disk, and passes its
// result through.
func (e *Engine) settled(id string) func(bool, error) (bool, error) {
	return func(ok bool, err error) (bool, error) {
		if ok && err == nil {
			e.notices.Notify(id)
		}
		return ok, err
	}
}
