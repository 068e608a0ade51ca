// Command sqliteonly uses the SQLite driver only.
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/sqlite"
)

func main() {
	dir, _ := os.MkdirTemp("", "sqliteonly-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(filepath.Join(dir, "a.db"))
	if err != nil {
		panic(err)
	}
	d.Close()
	s, err := lease.Open(context.Background(), "sqlite:"+filepath.Join(dir, "b.db"))
	if err != nil {
		panic(err)
	}
	s.Close()
}
