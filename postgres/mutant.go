package postgres

// The deliberately broken variants of this package that `make mutants`
// (.ci/mutants) checks the tests against; see the root's mutant.go.
const (
	mutantFenceNoLock    = "fence_no_lock"    // Fence: read the key's row without locking it (fenceQuery)
	mutantFenceKeyShare  = "fence_key_share"  // Fence: lock the row FOR KEY SHARE, which an UPDATE of no key column does not wait for (fenceQuery)
	mutantFenceNoExpiry  = "fence_no_expiry"  // Fence, R6: take an expired grant as live (verdict)
	mutantFenceNoSession = "fence_no_session" // Fence, R20: take a session-attached grant as live whatever its session (verdict)

	mutantSessionReadThenWrite = "session_read_then_write" // R21, R24: PutSession at a version reads the version, then writes by id alone (PutSession)
)
