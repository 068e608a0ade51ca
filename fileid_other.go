//go:build !linux

package lease

import "os"

// fileID names an inode.
type fileID struct{ fi os.FileInfo }

func (a fileID) same(b fileID) bool { return os.SameFile(a.fi, b.fi) }

func fileIDOf(f *os.File) (fileID, error) {
	fi, err := f.Stat()
	return fileID{fi}, err
}

// lockFileID is fileIDOf, and whether f is a regular file.
func lockFileID(f *os.File) (fileID, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileID{}, false, err
	}
	return fileID{fi}, fi.Mode().IsRegular(), nil
}

func pathID(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	return fileID{fi}, err
}
