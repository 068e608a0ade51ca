//go:build !linux

package lease

import "os"

// datasync makes f's data durable. Outside Linux it is a full fsync.
func datasync(f *os.File) error { return f.Sync() }
