package faultsuite

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Usage is one process's resident memory and goroutines at one moment.
type Usage struct {
	RSS        int64 // bytes (VmRSS)
	Goroutines int   // go_goroutines on its /metrics
}

// Measure reads p's VmRSS from /proc and go_goroutines from its /metrics
// (servicekit registers the Prometheus Go collector on every service).
func Measure(ctx context.Context, p *Proc) (Usage, error) {
	rss, err := vmRSS(p.Pid())
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", p.ID, err)
	}
	g, ok, err := Metric(ctx, "http://"+p.HTTP+"/metrics", "go_goroutines")
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", p.ID, err)
	}
	if !ok {
		return Usage{}, fmt.Errorf("%s: no go_goroutines on /metrics", p.ID)
	}
	return Usage{RSS: rss, Goroutines: int(g)}, nil
}

func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS", pid)
}

// Median is the element-wise median of several samples of one process.
func Median(us []Usage) Usage {
	rss := make([]int64, len(us))
	gs := make([]int, len(us))
	for i, u := range us {
		rss[i], gs[i] = u.RSS, u.Goroutines
	}
	slices.Sort(rss)
	slices.Sort(gs)
	if len(us) == 0 {
		return Usage{}
	}
	return Usage{RSS: rss[len(rss)/2], Goroutines: gs[len(gs)/2]}
}

// MiB prints bytes in MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// processCPU is a process's CPU time so far (user and system, every
// thread's, those that ended included), from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := statCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return d, nil
}

// statCPU is utime plus stime of a /proc/<pid>/stat line. The command name,
// in parentheses, may hold spaces and parentheses: fields are counted from
// after the last ')', where the state (field 3) comes first.
func statCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name in /proc stat %q, want 13 or more", len(f), stat)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// userHZ is the unit of /proc's CPU times (USER_HZ), 100 on every Linux
// architecture Go supports.
const userHZ = 100
