GO ?= go

.PHONY: test vet bench model mutants tidy-check fuzz

# test: what CI runs (.ci/run). Vet and format first, then every test under -race.
test: vet mutants
	$(GO) test -race -count=1 -shuffle=on ./...

vet:
	@unformatted=$$(gofmt -l . | grep -v '^testdata/'); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# bench: every store beside its floor, with storage round trips per operation.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./...

# model: the rapid model test (leasetest.TestModel) with more checks than `make test` runs.
model:
	$(GO) test -count=1 -run='^TestContract$$//^R2-R7_model$$' -rapid.checks=1000 .
	$(GO) test -count=1 -run='^TestModel$$' -rapid.checks=1000 .

# mutants: the exported suite (leasetest, through TestContract/memory) must
# catch every deliberately broken variant of decide. The same run must pass
# without a mutant, and a mutant run counts as caught only if a test failed
# (not the build). The R14/R15 cases do not reach decide and are left out.
# The model test alone (leasetest.TestModel) must catch each one too.
MUTANTS = early keep_epoch drop_unclean
MUTANT_RUN = -count=1 -run='^TestContract$$/^memory$$' -skip='/^memory$$/^R1[45]_' -rapid.nofailfile .
MUTANT_MODEL = -count=1 -run='^TestContract$$/^memory$$/^R2-R7_model$$' -rapid.nofailfile .
mutants:
	@$(GO) vet -tags lease_mutants . || { echo "the mutant build does not compile"; exit 1; }
	@out=$$($(GO) test $(MUTANT_RUN) 2>&1) || { echo "$$out" | tail -30; echo "the suite fails without a mutant: mutants prove nothing"; exit 1; }
	@for m in $(MUTANTS); do \
		out=$$(LEASE_MUTANT=$$m $(GO) test -tags lease_mutants $(MUTANT_RUN) 2>&1); \
		if [ $$? -eq 0 ]; then echo "mutant $$m survived: leasetest did not catch it"; exit 1; fi; \
		if ! echo "$$out" | grep -q -- '--- FAIL'; then echo "$$out" | tail -20; echo "mutant $$m: the test did not run"; exit 1; fi; \
		echo "mutant $$m caught:"; echo "$$out" | grep -m1 'want' | cut -c1-220; \
		if LEASE_MUTANT=$$m $(GO) test -tags lease_mutants $(MUTANT_MODEL) >/dev/null 2>&1; then \
			echo "mutant $$m survived the model test"; exit 1; fi; \
	done

tidy-check:
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

# fuzz: each native fuzz target for FUZZTIME; its seed corpus in
# testdata/fuzz/<name>/ runs in every `go test`. A target that does not
# exist fails the run, so that the list cannot silently go stale.
FUZZTIME ?= 30s
FUZZ_TARGETS = FuzzSQLiteRow FuzzMongoRecord FuzzValidateKey FuzzValidateOwner FuzzStoreURL \
	FuzzLocalRecord
fuzz:
	@have=$$($(GO) test -list='^Fuzz' . | grep '^Fuzz'); \
	for f in $(FUZZ_TARGETS); do \
		if ! echo "$$have" | grep -qx "$$f"; then echo "fuzz target $$f does not exist"; exit 1; fi; \
		echo "fuzzing $$f for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) . || exit 1; \
	done
