package lease

import (
	"context"
	"errors"
)

// These schemes arrive with their own issues.
func openMongoStore(ctx context.Context, url string, opts []Option) (Store, error) {
	return nil, errors.New("lease: the mongodb:// store is not built yet")
}
