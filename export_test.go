package lease

import "context"

// AcquireBatch and RenewBatch expose the DocumentStore's batched acquire
// and renew (R12), the paths Hold's loops take, to leasetest's model in
// this package's tests: the model finds them on the stores it drives and
// checks every key of a batch as if it had been written alone. Each answer
// is the grant and error at the same index.
func (s *DocumentStore) AcquireBatch(ctx context.Context, keys []string) ([]Grant, []error) {
	return splitResults(s.acquireMany(ctx, keys))
}

// RenewBatch: see AcquireBatch.
func (s *DocumentStore) RenewBatch(ctx context.Context, gs []Grant) ([]Grant, []error) {
	return splitResults(s.renewMany(ctx, &renewScratch{grants: gs}))
}

func splitResults(rs []grantResult) ([]Grant, []error) {
	gs, errs := make([]Grant, len(rs)), make([]error, len(rs))
	for i, r := range rs {
		gs[i], errs[i] = r.g, r.err
	}
	return gs, errs
}
