package engineshim

import (
	"testing"
	"time"
)

func TestRetryDelayBacksOffToTheLimit(t *testing.T) {
	for _, c := range []struct {
		n     int
		limit time.Duration
		want  time.Duration
	}{
		{1, time.Second, 100 * time.Millisecond},
		{2, time.Second, 200 * time.Millisecond},
		{4, time.Second, 800 * time.Millisecond},
		{5, time.Second, time.Second},
		{50, time.Second, time.Second},
		{1, 10 * time.Millisecond, 10 * time.Millisecond}, // a limit under the first step wins
	} {
		if got := retryDelay(c.n, c.limit); got != c.want {
			t.Errorf("retryDelay(%d, %v) = %v, want %v", c.n, c.limit, got, c.want)
		}
	}
}
