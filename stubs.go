package lease

import (
	"errors"
)

// These schemes arrive with their own issues.
func openSQLiteStore(path string, opts []Option) (Store, error) {
	return nil, errors.New("lease: the sqlite: store is not built yet")
}

func openLocalStore(root string, opts []Option) (Store, error) {
	return nil, errors.New("lease: the file: store is not built yet")
}
