package testclock

import (
	"testing"
	"time"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	c := New()
	if got := c.Now(); !got.Equal(Start) {
		t.Fatalf("New().Now() = %v; want %v", got, Start)
	}
	c.Advance(1500 * time.Millisecond)
	if got := c.Now(); !got.Equal(Start.Add(1500 * time.Millisecond)) {
		t.Fatalf("after Advance: %v", got)
	}
	back := Start.Add(-time.Hour)
	c.Set(back)
	if got := c.Now(); !got.Equal(back) {
		t.Fatalf("after Set: %v; want %v", got, back)
	}
}

// TestClockConcurrent: readers and writers share one clock under -race.
func TestClockConcurrent(t *testing.T) {
	c := New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			c.Advance(time.Millisecond)
		}
	}()
	for range 100 {
		c.Now()
	}
	<-done
	if got := c.Now(); !got.Equal(Start.Add(100 * time.Millisecond)) {
		t.Fatalf("after 100 Advances of 1ms: %v", got)
	}
}
