//go:build !linux

package lease

import "os"

// flockView tells whether a lock file is flocked by anyone. Outside Linux
// there is no list of flocks to read, so it probes: it takes a shared
// flock for an instant. A racing Acquire may then find the flock taken
// and look again; the local store is supported on Linux.
type flockView struct{}

func (v *flockView) locked(f *os.File, id fileID) (bool, error) { return flockProbe(f) }

// devMap is not needed outside Linux.
type devMap struct{}

// flockView returns a view for one Holder or Holders call.
func (s *LocalStore) flockView() *flockView { return new(flockView) }
