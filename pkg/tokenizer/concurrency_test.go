package tokenizer

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConcurrentEncode: one Tokenizer serves many goroutines (the scratch
// buffers come from a pool); under -race this checks they are not shared.
func TestConcurrentEncode(t *testing.T) {
	tok := Default()
	cases := reference(t)
	if raceEnabled {
		cases = cases[:300]
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(cases); i += 2 {
				c := cases[i%len(cases)]
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
					select {
					case errs <- c.Name:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for name := range errs {
		t.Errorf("%s: concurrent Encode differs", name)
	}
}
