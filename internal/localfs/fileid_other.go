//go:build !linux

package localfs

import "os"

// FileID names an inode.
type FileID struct{ fi os.FileInfo }

// Same reports whether a and b name one file.
func (a FileID) Same(b FileID) bool { return os.SameFile(a.fi, b.fi) }

// IDOf is the file f is open on.
func IDOf(f *os.File) (FileID, error) {
	fi, err := f.Stat()
	return FileID{fi}, err
}

// lockFileID is IDOf, and whether f is a regular file.
func lockFileID(f *os.File) (FileID, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return FileID{}, false, err
	}
	return FileID{fi}, fi.Mode().IsRegular(), nil
}

// PathID is the file path names, not following a final symlink.
func PathID(path string) (FileID, error) {
	fi, err := os.Lstat(path)
	return FileID{fi}, err
}
