package lease

// The deliberately broken variants of decide that `make mutants` checks the
// model test against. See mutant_on.go.
const (
	mutantEarly       = "early"        // take over 1 ms before expiry
	mutantKeepEpoch   = "keep_epoch"   // keep the epoch on takeover
	mutantDropUnclean = "drop_unclean" // never report PreviousUnclean
)
