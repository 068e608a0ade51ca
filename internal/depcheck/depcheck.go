// Package depcheck holds no code: its test checks, with go list -deps,
// that a program links the database libraries of the drivers it imports
// and no others (the small programs in testdata/), and that a program on
// the built-in stores alone stays small.
package depcheck
