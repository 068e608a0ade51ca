package localfs

// The deliberately broken variants of this package that `make mutants`
// (.ci/mutants) checks the project's tests against; see package lease's
// mutant.go. Each hook compiles away in normal builds.
const (
	mutantEmptyAbsent   = "empty_absent"   // local: read an empty lock file as a key never written (ReadRecord)
	mutantHeldUnwatched = "held_unwatched" // local: ignore the events that show a Held's lock file deleted, moved or replaced (checkHeld)
)
