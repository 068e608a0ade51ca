//go:build !linux

package localfs

import "os"

// Datasync makes f's data durable. Outside Linux it is a full fsync.
func Datasync(f *os.File) error { return f.Sync() }
