//go:build !unix

package scheduler

import "time"

func cpuTime() time.Duration { return 0 }
