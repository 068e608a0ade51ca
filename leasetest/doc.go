// Package leasetest is the conformance suite of package lease: the rules of
// its contract (R1-R24, docs/contract.md), a rapid model test, and a
// porcupine linearizability check, for any lease.Driver or lease.Store; and
// TestHeldModel, a rapid model of the Held layer above a store (Hold,
// Release, Confirm, ReleaseAll, Close, waiters and storage faults: R12,
// R15-R17; through sessions over a driver that keeps them: R18-R23). Every driver and store this module ships passes it; a driver
// written elsewhere proves itself with it:
//
//	func TestMyDriver(t *testing.T) {
//		leasetest.TestDriver(t, func(t *testing.T) lease.Driver {
//			d, err := mydriver.Open(t.TempDir()) // a fresh, empty backend each call
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { d.Close() })
//			return d
//		})
//	}
//
// A driver states what it can do by implementing lease.DriverInfo
// (coordinates separate processes; how finely it keeps ExpiresAt); the suite
// checks the expiry it states, and a driver stating ServerClock is judged
// by its server's clock (R8); TestServerClockSkew checks such a driver with
// hosts ten minutes off the server, given a way to cut a holder off it. A
// driver stating Sessions must be a lease.SessionDriver that keeps each
// record's session exactly and its session records by compare-and-swap
// (R24: TestDriver's "R24" subtests). TestStore checks a whole Store (open
// gives every store of one test the same backend: see Shared). The fault
// wrappers (NewFaultDriver, Slow, GarbageGets; they hide the optional
// interfaces of the driver they wrap, sessions included, and state no
// Sessions) and the history Recorder with CheckHistory serve a driver's
// own tests too.
package leasetest
