GO ?= go

.PHONY: test vet bench model mutants tidy-check fuzz

# test: what CI runs (.ci/run). Vet and format first, then every test under -race.
test: vet mutants
	$(GO) test -race -count=1 -shuffle=on ./...

vet:
	@unformatted=$$(gofmt -l . | grep -v '^testdata/'); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# bench: every store beside its floor, with storage round trips per operation.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./...

# model: the rapid model test with more checks than `make test` runs.
model:
	$(GO) test -count=1 -run='^TestModel' -rapid.checks=1000 .

# mutants: the model test must catch every deliberately broken variant of decide.
MUTANTS = early keep_epoch drop_unclean
mutants:
	@for m in $(MUTANTS); do \
		if out=$$(LEASE_MUTANT=$$m $(GO) test -tags lease_mutants -count=1 -run='^TestModel$$/^memory$$' -rapid.nofailfile . 2>&1); then \
			echo "mutant $$m survived: the model test did not catch it"; exit 1; \
		else echo "mutant $$m caught:"; echo "$$out" | grep -m1 'want' | cut -c1-220; fi; \
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
