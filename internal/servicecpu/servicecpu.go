// Package servicecpu measures the CPU time each service of one process
// spends: it runs a piece of work under a CPU profile and splits the
// profile's samples by the pprof label that names a goroutine's service
// (internal/mesh labels every service it runs). It is how the hot-path
// benchmark tells the frontend's cost from the scheduler's in a mesh that
// runs in one process.
package servicecpu

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// Unlabelled names the samples of goroutines no service started: the
// runtime's (garbage collection's background workers, the scheduler) and
// any library goroutine created outside a labelled one.
const Unlabelled = "(unlabelled)"

// Split is the CPU time of one measured piece of work.
type Split struct {
	// By is the sampled CPU time per label value (Unlabelled for the rest);
	// a figure of N samples (N × Period) is good to about 1/√N of itself.
	By map[string]time.Duration
	// Sampled is the sum of By.
	Sampled time.Duration
	// Process is the process's user + system CPU time over the same work
	// (getrusage), the figure the samples are a split of.
	Process time.Duration
	// Period is the profile's sampling period: 1 s over Measure's hz.
	Period time.Duration
	// Profile is the CPU profile itself (pprof's format), for `go tool
	// pprof` (its -tagfocus selects a label's samples).
	Profile []byte
}

// Apart moves samples out of their goroutine's label: a sample whose stack
// has a function whose name starts with Prefix counts as Name (e.g. the
// simulated engine, which runs inside the engine shim's goroutines).
type Apart struct {
	Prefix, Name string
}

// Measure runs work under a CPU profile of the process sampled hz times a
// second (pprof's 100 when hz is 0) and splits the samples by the value of
// the pprof label key. Only one CPU profile can run in a process at a time:
// Measure fails if another one is.
//
// A rate other than 100 Hz is set the one way the runtime offers: before
// pprof starts the profile, whose own attempt to set 100 Hz then fails (the
// runtime's complaint, written to stderr where it would land inside a
// benchmark's result line, is silenced); the profile records the rate that
// holds. At 100 Hz
// a service that costs 100 µs a turn over 4,000 turns is 40 samples, ±16 %;
// at 250 Hz, ±10 %. Linux samples a thread's CPU time at most once a kernel
// tick (CONFIG_HZ: 250 on the machines this project runs on), so a rate
// above it takes no more samples and counts each at less than it stands
// for.
func Measure(key string, apart []Apart, hz int, work func() error) (Split, error) {
	var buf bytes.Buffer
	before, err := processCPU()
	if err != nil {
		return Split{}, err
	}
	if hz > 0 && hz != defaultHz {
		started, restoreErr := withoutStderr(func() error {
			runtime.SetCPUProfileRate(hz)
			return pprof.StartCPUProfile(&buf)
		})
		if started == nil && restoreErr != nil {
			pprof.StopCPUProfile() // this call's own profile: no other runs
		}
		if err := errors.Join(started, restoreErr); err != nil {
			return Split{}, fmt.Errorf("servicecpu: %w", err)
		}
	} else if err := pprof.StartCPUProfile(&buf); err != nil {
		return Split{}, fmt.Errorf("servicecpu: %w", err)
	}
	werr := work()
	pprof.StopCPUProfile()
	after, err := processCPU()
	if err := errors.Join(werr, err); err != nil {
		return Split{}, err
	}
	raw := buf.Bytes()
	p, err := profile.ParseData(raw)
	if err != nil {
		return Split{}, fmt.Errorf("servicecpu: reading the profile: %w", err)
	}
	s, err := split(p, key, apart)
	s.Process, s.Period, s.Profile = after-before, time.Duration(p.Period), raw
	return s, err
}

// defaultHz is the rate pprof.StartCPUProfile sets.
const defaultHz = 100

// split sums p's CPU samples by label.
func split(p *profile.Profile, key string, apart []Apart) (Split, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return Split{}, errors.New("servicecpu: the profile has no cpu/nanoseconds samples")
	}
	s := Split{By: map[string]time.Duration{}}
	for _, sm := range p.Sample {
		name := Unlabelled
		if v := sm.Label[key]; len(v) > 0 {
			name = v[0]
		}
		if a := apartOf(sm, apart); a != "" {
			name = a
		}
		d := time.Duration(sm.Value[idx])
		s.By[name] += d
		s.Sampled += d
	}
	return s, nil
}

// apartOf is the Apart name the sample's stack falls under, or "".
func apartOf(sm *profile.Sample, apart []Apart) string {
	for _, loc := range sm.Location {
		for _, ln := range loc.Line {
			if ln.Function == nil {
				continue
			}
			for _, a := range apart {
				if strings.HasPrefix(ln.Function.Name, a.Prefix) {
					return a.Name
				}
			}
		}
	}
	return ""
}

// processCPU is the process's user + system CPU time so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("servicecpu: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
