package lease

import (
	"context"
	"errors"
)

// These schemes arrive with their own issues.
func openSQLiteStore(path string, opts []Option) (Store, error) {
	return nil, errors.New("lease: the sqlite: store is not built yet")
}

func openMongoStore(ctx context.Context, url string, opts []Option) (Store, error) {
	return nil, errors.New("lease: the mongodb:// store is not built yet")
}
