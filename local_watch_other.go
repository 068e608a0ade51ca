//go:build !linux

package lease

import "errors"

// watchSupported tells that watching lock files needs Linux inotify.
const watchSupported = false

// localWatch is not available: watching lock files needs Linux inotify.
type localWatch struct{}

type watchEntry struct{}

func startWatch(root string) (*localWatch, error) {
	return nil, errors.New("lease: watching lock files needs Linux (inotify); poll instead")
}

func (w *localWatch) add(name string, wake func()) *watchEntry { return nil }

func (w *localWatch) remove(name string, e *watchEntry) bool { return true }

func (w *localWatch) stop() {}

type heldEntry struct{}

func (w *localWatch) addHeld(name string, check func()) *heldEntry { return nil }

func (w *localWatch) removeHeld(name string, e *heldEntry) bool { return true }
