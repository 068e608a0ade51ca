//go:build unix

package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/childproc"
)

// nobody is the user and group a local child drops to when it runs as
// root, for whom permission bits do not count.
const nobody = 65534

// acquireInReadOnlyRoot opens a store on root, takes away this process's
// right to create files there (as root, by becoming nobody: the change is
// for the whole process, hence a child), then acquires and holds a key
// never written, and describes both errors.
func acquireInReadOnlyRoot(root string) string {
	s, err := NewLocalStore(root, WithOwner("reader"))
	if err != nil {
		return "open: " + err.Error()
	}
	defer s.Close()
	if os.Geteuid() == 0 {
		if err := errors.Join(syscall.Setgroups(nil), syscall.Setgid(nobody), syscall.Setuid(nobody)); err != nil {
			return "setuid: " + err.Error()
		}
	} else if err := os.Chmod(root, 0o555); err != nil {
		return "chmod: " + err.Error()
	}
	_, aerr := s.Acquire(ctxBG, "fresh")
	ctx, cancel := context.WithTimeout(ctxBG, 30*time.Second) // a guard, far beyond an answer at once
	defer cancel()
	_, herr := Hold(ctx, s, "fresh")
	return describeErr(aerr) + "\t" + describeErr(herr)
}

// describeErr says what err matches, then its text.
func describeErr(err error) string {
	var se *StorageError
	return fmt.Sprintf("storage=%v corrupt=%v permission=%v %v",
		errors.As(err, &se), errors.Is(err, ErrCorrupt), errors.Is(err, os.ErrPermission), err)
}

// TestLocalReadOnlyRoot (R10): a root this process cannot create files in
// is a storage error that says the root is not writable, once, with one
// "lease:" prefix; not a corrupt record, which operators are told to
// repair by deleting lock files. Hold gives up at once: waiting does not
// cure a permission problem. Permission bits do not stop root, so the
// store runs in a child process that drops to nobody.
func TestLocalReadOnlyRoot(t *testing.T) {
	dir, err := os.MkdirTemp("", "lease-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "root")
	// Readable by nobody on the way down, writable by the owner only.
	if err := errors.Join(os.Chmod(dir, 0o755), os.Mkdir(root, 0o755)); err != nil {
		t.Fatal(err)
	}
	c := startLocalChild(t, "reader")
	c.Send(t, "readonly "+root)
	acquired, held, _ := strings.Cut(c.Recv(t), "\t")
	for what, got := range map[string]string{"Acquire": acquired, "Hold": held} {
		want := `storage=true corrupt=false permission=true lease: acquire "fresh": root ` + root + " is not writable by this process: "
		if !strings.HasPrefix(got, want) || strings.Count(got, "lease:") != 1 || !strings.HasSuffix(got, "permission denied") {
			t.Errorf("%s in a read-only root:\n got: %s\nwant: %s… permission denied (one prefix, no ErrCorrupt)", what, got, want)
		}
	}
	childproc.StopAll(t, []*child{c})
}
