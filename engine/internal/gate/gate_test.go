package gate

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Drain waits for the call inside, refuses new ones from the moment it
// begins, and returns once the call has left.
func TestDrainWaitsForTheCallInside(t *testing.T) {
	var g Gate
	if !g.Enter() {
		t.Fatal("a new gate refused a call")
	}
	drained := make(chan struct{})
	go func() { g.Drain(); close(drained) }()
	for !g.Closing() {
		runtime.Gosched()
	}
	if g.Enter() {
		t.Fatal("a call entered after Drain began")
	}
	select {
	case <-drained:
		t.Fatal("Drain returned with a call inside")
	default:
	}
	if n := g.Inside(); n != 1 {
		t.Fatalf("%d calls inside, want the one that entered before Drain", n)
	}
	g.Leave()
	<-drained
	if n := g.Inside(); n != 0 {
		t.Fatalf("%d calls inside after Drain", n)
	}
}

// Drain of an idle gate returns at once, and the gate stays closed.
func TestDrainOfAnIdleGate(t *testing.T) {
	var g Gate
	g.Drain()
	if !g.Closing() || g.Enter() {
		t.Fatal("the gate let a call in after Drain")
	}
	g.Drain() // a second Drain is harmless
}

// Calls racing Drain either get in, and Drain waits for them, or are
// refused: when Drain returns no call is inside and none gets in.
func TestCallsRacingDrain(t *testing.T) {
	for range 50 {
		var g Gate
		var wg sync.WaitGroup
		var admitted atomic.Int64 // calls let in and not yet left
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 100 {
					if !g.Enter() {
						return
					}
					admitted.Add(1)
					runtime.Gosched()
					admitted.Add(-1)
					g.Leave()
				}
			}()
		}
		close(start)
		g.Drain()
		if n := admitted.Load(); n != 0 {
			t.Fatalf("Drain returned with %d calls inside", n)
		}
		if g.Enter() {
			t.Fatal("a call entered after Drain returned")
		}
		wg.Wait()
	}
}
