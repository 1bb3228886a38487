package servicekit

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// No call waits for a worker: more calls than are kept run at once, each
// blocked until all have started. Once they end, at most maxKeptCallWorkers
// stay, and all leave when the server drains.
func TestCallWorkersNeverMakeACallWait(t *testing.T) {
	done := make(chan struct{})
	w := newCallWorkers(done)
	const n = maxKeptCallWorkers + 50
	var started, finished sync.WaitGroup
	started.Add(n)
	finished.Add(n)
	for range n {
		w.run(func() {
			defer finished.Done()
			started.Done()
			started.Wait()
		})
	}
	all := make(chan struct{})
	go func() { finished.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("calls waited for each other: not all had started after 10 s")
	}
	poll(t, func() bool { return w.kept.Load() == maxKeptCallWorkers })
	close(done)
	poll(t, func() bool { return w.kept.Load() == 0 })
}

// Calls one after another run on the kept goroutines, not each on a new one
// (whose stack would grow again).
func TestCallWorkersReuseTheirGoroutines(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := newCallWorkers(done)
	const calls = 1000
	ran := map[string]bool{}
	for range calls {
		id := make(chan string)
		w.run(func() { id <- goroutineID() })
		ran[<-id] = true
	}
	if len(ran) > calls/10 {
		t.Fatalf("%d calls ran on %d goroutines", calls, len(ran))
	}
}

// goroutineID is the calling goroutine's number, from its stack's header
// ("goroutine 18 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// poll waits, up to a deadline, for cond.
func poll(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
	}
}
