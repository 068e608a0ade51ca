GO ?= go

.PHONY: test vet bench model mutants tidy-check fuzz

# test: what CI runs (.ci/run). Vet and format first, then every test under
# -race; ./internal/depcheck among them checks that package lease links no
# database library and each driver package only its own. Each package's
# test binary gets TEST_TIMEOUT (go test applies -timeout per package):
# the slowest, a driver package with its server, takes a few minutes on a
# quiet 2-core machine, and its tests wait for counts and events, not for
# the machine to be idle.
TEST_TIMEOUT ?= 15m
test: vet mutants
	$(GO) test -race -count=1 -shuffle=on -timeout=$(TEST_TIMEOUT) ./...

vet:
	@unformatted=$$(gofmt -l . | grep -v '^testdata/'); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# bench: every store beside its floor, with storage round trips per operation.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 -timeout=30m ./...

# model: the rapid model tests (leasetest.TestModel in every package's
# TestContract, and leasetest.TestHeldModel of the Held layer, under -race,
# through sessions where the driver keeps them) with more checks than
# `make test` runs. -rapid.checks goes after the packages: go test takes
# everything after a flag it does not know for the test binary, packages
# included, and would run the current directory's package alone.
MODEL_PACKAGES = . ./sqlite ./postgres ./mongodb
model:
	$(GO) test -count=1 -timeout=60m -run='^TestContract$$//^R2-R7_model$$' $(MODEL_PACKAGES) -rapid.checks=1000
	$(GO) test -race -count=1 -timeout=30m -run='^TestHeldModel$$' . ./sqlite -rapid.checks=1000

# mutants: the project's own tests must catch every deliberately broken
# variant in mutant.go (R2, R4, R6, R7, R8, R9, R10, R12, the local store, Hold)
# and in the drivers' mutant.go files (postgres/, sqlite/: Fence).
# .ci/mutants holds the table of mutant and test selection; each selection
# must pass without its mutant, and a mutant counts as caught only if a test
# failed on an assertion (not the build). The decide mutants must also be
# caught by the model test alone (leasetest.TestModel).
mutants:
	@GO=$(GO) .ci/mutants

tidy-check:
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

# fuzz: each native fuzz target (PACKAGE:TARGET) for FUZZTIME; its seed
# corpus in PACKAGE/testdata/fuzz/<name>/ runs in every `go test`. A
# target that does not exist fails the run, so that the list cannot
# silently go stale.
FUZZTIME ?= 30s
FUZZ_TARGETS = .:FuzzValidateKey .:FuzzValidateOwner .:FuzzStoreURL ./internal/localfs:FuzzLocalRecord ./internal/localfs:FuzzLocalSlots \
	./sqlite:FuzzSQLiteRow ./mongodb:FuzzMongoRecord ./mongodb:FuzzMongoURL ./mongodb:FuzzMongoOwnerGuard \
	./cmd/lease:FuzzStorePasswords
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; f=$${t##*:}; \
		if ! $(GO) test -list='^Fuzz' $$pkg | grep -qx "$$f"; then echo "fuzz target $$f does not exist in $$pkg"; exit 1; fi; \
		echo "fuzzing $$pkg $$f for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s $$pkg || exit 1; \
	done
