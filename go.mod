module github.com/leasekit/lease

go 1.26.0

require (
	github.com/gofrs/flock v0.13.2
	golang.org/x/sys v0.49.0
	pgregory.net/rapid v1.3.0
)
