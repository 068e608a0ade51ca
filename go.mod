module github.com/leasekit/lease

go 1.25.0
