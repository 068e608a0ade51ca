package lease

// The deliberately broken variants that `make mutants` (.ci/mutants) checks
// the project's tests against, one per rule. Each is one hook of the form
// `if mutant == mutantX`, which compiles away in normal builds. See
// mutant_on.go.
const (
	mutantEarly             = "early"               // R4: take over 1 ms before expiry (decide)
	mutantKeepEpoch         = "keep_epoch"          // R2: keep the epoch on takeover (decide)
	mutantDropUnclean       = "drop_unclean"        // R4: never report PreviousUnclean (decide)
	mutantRenewExpired      = "renew_expired"       // R6: renew a grant whose record has expired (Renew, holding)
	mutantReleaseLost       = "release_lost"        // R7: report a release done without writing it (Release)
	mutantReleaseAnyEpoch   = "release_any_epoch"   // R7: release whatever record a re-read finds (holding)
	mutantNoReread          = "no_reread"           // R9: return a write of unknown outcome as failed, unremembered (write)
	mutantOnePending        = "one_pending"         // R9: remember only the newest unsettled write (answered)
	mutantCorruptAbsent     = "corrupt_absent"      // R10: read a corrupt record as no record (readResult)
	mutantSkipInode         = "skip_inode"          // local: skip the re-check that the path still names the locked inode (stillLinked)
	mutantNoDeadline        = "no_deadline"         // Hold: never end a held lease at its deadline (expireLocked, nextWakeLocked)
	mutantBatchRenewExpired = "batch_renew_expired" // R6, R12: a batched renewal renews a grant whose record has expired (renewMany)
	mutantBatchForgetsTable = "batch_forgets_table" // R4c, R12: a batched acquire ignores the grants this store holds (decideMany)
	mutantShareGrant        = "share_grant"         // R16: a second Hold of a key shares the live Held's grant (enqueue)
	mutantLateEnd           = "late_end"            // R17: ReleaseAll and a bare Release end the Helds after their writes (DocumentStore)
	mutantCloseSkipsHolds   = "close_skips_holds"   // R15: Close leaves the Helds live (keeper.close)
	mutantOrphan            = "orphan"              // R17: a grant taken for a waiter that left is never given back (grantedLocked)
	mutantWholeBatch        = "whole_batch"         // R12, R17: a renewal batch is one call bounded by its earliest deadline, never split (renew)
	mutantHostClock         = "host_clock"          // R8: judge expiry by the host's clock in server-clock mode (DocumentStore.now)

	mutantRenewAfterKill      = "renew_after_kill"      // R19: a renewal that finds its session ended writes it live again (renewSession)
	mutantTakeWithoutKill     = "take_without_kill"     // R21: take a key of a dead session without ending the session (killSession)
	mutantSessionPastDeadline = "session_past_deadline" // R19: renew a session past this store's deadline for it (renewSession)
	mutantSessionIDReused     = "session_id_reused"     // R18: a new session takes the id of the last one (startSession)
	mutantSessionEndFirst     = "session_end_first"     // R17, R22: ReleaseAll ends the session before the Helds end (ReleaseAll)
	mutantUnreadSessionFree   = "unread_session_free"   // R23: a key whose session is missing reads as free (sessionOf)

	mutantBargePlace   = "barge_place"   // R25: take a free key whose place is another's (decide)
	mutantHandoffAfter = "handoff_after" // R25: Handoff writes the place after the release that frees the key (handoff)
)
