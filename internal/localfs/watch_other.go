//go:build !linux

package localfs

import (
	"errors"
	"time"
)

// WatchSupported tells that watching lock files needs Linux inotify.
const WatchSupported = false

// Watch is not available: watching lock files needs Linux inotify.
type Watch struct{}

// Waiter is one registered wake.
type Waiter struct{}

// StartWatch fails: poll instead.
func StartWatch(root string, idle time.Duration) (*Watch, error) {
	return nil, errors.New("lease: watching lock files needs Linux (inotify); poll instead")
}

// Add does nothing.
func (w *Watch) Add(name string, wake func()) *Waiter { return nil }

// Remove does nothing.
func (w *Watch) Remove(name string, e *Waiter) {}

// CheckRoot does nothing.
func (w *Watch) CheckRoot() {}

// Stop does nothing.
func (w *Watch) Stop() {}

// HeldCheck is one registered check.
type HeldCheck struct{}

// AddHeld does nothing.
func (w *Watch) AddHeld(name string, check func()) *HeldCheck { return nil }

// RemoveHeld does nothing.
func (w *Watch) RemoveHeld(name string, e *HeldCheck) {}
