package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestR16FailIfHeldBesideAHangingLook: R16. A store makes one look at a
// time; while a look of another key hangs (up to lookTimeout), a
// FailIfHeld Hold of a key another store holds still fails at once with a
// *HeldError naming the holder: it does not wait for that look. In the
// bubble "at once" means that no virtual time passes.
func TestR16FailIfHeldBesideAHangingLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newGateDriver()
		alice, bob := loopStore(t, d, "alice"), loopStore(t, d, "bob")
		bg := mustAcquire(t, bob, "k")
		d.setHang("other", true)

		ctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() {
			_, err := Hold(ctx, alice, "other")
			waited <- err
		}()
		synctest.Wait() // alice's look of "other" hangs in its write

		for i := range 2 {
			start := time.Now()
			_, err := Hold(t.Context(), alice, "k", FailIfHeld())
			if took := time.Since(start); took != 0 {
				t.Errorf("FailIfHeld Hold %d answered after %v of virtual time; want at once", i, took)
			}
			wantHeldErrorOf(t, err, bg)
		}

		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Errorf("the hanging Hold = %v; want it to give up", err)
		}
		d.setHang("other", false)
	})
}

// TestR16FailIfHeldWhileGivingUp: R16, R17. While the write releasing a
// Held's grant is in flight (storage slow or down), the store still holds
// the key: a FailIfHeld Hold of it fails at once with a *HeldError naming
// the store's own grant, rather than wait for the write to land.
func TestR16FailIfHeldWhileGivingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newGateDriver()
		alice := loopStore(t, d, "alice")
		h := mustHold(t, alice, "k")
		d.shut()
		released := make(chan error, 1)
		go func() { released <- h.Release(t.Context()) }()
		synctest.Wait() // the release waits at the gate; the Held has ended

		start := time.Now()
		fctx, fcancel := context.WithTimeout(t.Context(), holdTTL)
		_, err := Hold(fctx, alice, "k", FailIfHeld())
		fcancel()
		if took := time.Since(start); took != 0 {
			t.Errorf("FailIfHeld Hold answered after %v of virtual time; want at once", took)
		}
		wantHeldErrorOf(t, err, h.Grant())

		d.open()
		if err := <-released; err != nil {
			t.Errorf("Release = %v", err)
		}
		h2 := mustHold(t, alice, "k", FailIfHeld()) // once released, the key is free
		if g := h2.Grant(); g.Epoch != 2 || g.PreviousUnclean {
			t.Errorf("Hold after the release got %+v; want epoch 2, clean", g)
		}
		if err := h2.Release(t.Context()); err != nil {
			t.Error(err)
		}
	})
}
