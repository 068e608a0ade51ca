package lease

import "errors"

// UnwatchedLocal returns s as a Store whose waiting Holds poll instead of
// waiting for the kernel to tell of releases (watchRelease), and whose
// Helds are not watched for replaced lock files (watchHeld), so that it
// can run inside a testing/synctest bubble: a goroutine blocked reading
// inotify events is not durably blocked, and the bubble's clock would stop
// (leasetest.TestHeldModelStores).
func UnwatchedLocal(s *LocalStore) Store { return unwatchedLocal{s} }

type unwatchedLocal struct{ *LocalStore }

// watchRelease shadows LocalStore's: this store cannot watch.
func (unwatchedLocal) watchRelease(string, func()) (func(), error) {
	return nil, errors.New("lease: this test store does not watch for releases")
}

// watchHeld shadows LocalStore's: its Helds learn of a replaced lock file
// at their next Confirm or Release, as on a platform without inotify.
func (unwatchedLocal) watchHeld(Grant) {}
