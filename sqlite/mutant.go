package sqlite

// The deliberately broken variants of this package that `make mutants`
// (.ci/mutants) checks the tests against; see the root's mutant.go.
const (
	mutantFenceNoLock   = "fence_no_lock"   // Fence: check the grant with a SELECT, which takes no write lock (fenceRows)
	mutantFenceNoExpiry = "fence_no_expiry" // Fence, R6: take an expired grant as live (fenceNowMs)

	mutantSessionReadThenWrite = "session_read_then_write" // R21, R24: PutSession at a version reads the version, then writes by id alone (putSession)
)
