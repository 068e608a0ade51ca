package leaseotel

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/leasekit/lease"
)

// TestErrorType: error.type names the class of a failure in a few words,
// through wrapping, and the first class an error matches wins (a held
// key whose wait ran out is "held", not "timeout").
func TestErrorType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{lease.ErrNotFound, "not_found"},
		{fmt.Errorf("put: %w", lease.ErrConflict), "conflict"},
		{&lease.HeldError{Key: "k", Owner: "o", Epoch: 1}, "held"},
		{errors.Join(context.DeadlineExceeded, lease.ErrHeld), "held"},
		{&lease.StorageError{Op: "get", Key: "k", Err: lease.ErrCorrupt}, "corrupt"},
		{lease.ErrClosed, "closed"},
		{lease.ErrLost, "lost"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "timeout"},
		{lease.ErrInvalidKey, "invalid_key"},
		{&lease.StorageError{Op: "put", Key: "k", Err: errors.New("disk full")}, "storage"},
	} {
		if got := errorType(c.err); got != c.want {
			t.Errorf("errorType(%v) = %q; want %q", c.err, got, c.want)
		}
	}
}
