package lease

import "testing"

// DriverUnderTest is one driver this module ships, as the conformance suite
// (contract_test.go, package lease_test) opens it: the same table the
// package's own driver tests use, and for MongoDB the test server that
// mongoserver_test.go starts.
type DriverUnderTest struct {
	Name string
	Open func(t *testing.T) Driver
}

// DriversUnderTest lists the registered test drivers.
func DriversUnderTest() []DriverUnderTest {
	ds := make([]DriverUnderTest, 0, len(testDrivers))
	for _, td := range testDrivers {
		ds = append(ds, DriverUnderTest{Name: td.name, Open: td.open})
	}
	return ds
}
