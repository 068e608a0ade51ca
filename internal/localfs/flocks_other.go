//go:build !linux

package localfs

import "os"

// FlockView tells whether a lock file is flocked by anyone. Outside Linux
// there is no list of flocks to read, so it probes: it takes a shared
// flock for an instant. A racing Acquire may then find the flock taken
// and look again; the local store is supported on Linux.
type FlockView struct{}

// Locked reports whether the file f is flocked.
func (v *FlockView) Locked(f *os.File, id FileID) (bool, error) { return flockProbe(f) }

// Flocks makes FlockViews; outside Linux it has nothing to learn.
type Flocks struct{}

// View returns a view for one Holder or Holders call.
func (l *Flocks) View(root string) *FlockView { return new(FlockView) }
