package enginesim_test

import (
	"fmt"
	"time"

	"switchyard.dev/pkg/enginesim"
)

// A driver on virtual time: add requests, step until idle, advance a clock
// by each step's duration. The engine shim does the same with real sleeps.
func Example() {
	e, err := enginesim.New(enginesim.Config{NumGPUBlocks: 1024, Seed: 1})
	if err != nil {
		panic(err)
	}
	prompt := make([]uint32, 1000)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	turn := func(id string, prompt []uint32) (out []uint32) {
		if err := e.Add(enginesim.Request{ID: id, SessionID: "s1", Prompt: prompt, MaxTokens: 8, IgnoreEOS: true}); err != nil {
			panic(err)
		}
		var clock time.Duration
		for e.HasWork() {
			res := e.Step()
			clock += res.Duration
			for _, o := range res.Outputs {
				out = append(out, o.Token)
				if o.First {
					fmt.Printf("%s: first token at %v, %d prompt tokens cached\n", id, clock.Round(time.Millisecond), o.CachedTokens)
				}
				if o.Finish != enginesim.FinishNone {
					fmt.Printf("%s: %s after %d tokens at %v\n", id, o.Finish, o.Usage.CompletionTokens, clock.Round(time.Millisecond))
				}
			}
		}
		return out
	}
	answer := turn("turn-1", prompt)
	// The next turn extends the conversation: its prefix is a cache hit.
	next := append(append(append([]uint32{}, prompt...), answer...), 7, 7, 7)
	turn("turn-2", next)
	// Output:
	// turn-1: first token at 30ms, 0 prompt tokens cached
	// turn-1: length after 8 tokens at 75ms
	// turn-2: first token at 6ms, 992 prompt tokens cached
	// turn-2: length after 8 tokens at 51ms
}
