package flashindex

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"switchyard.dev/pkg/kv"
)

// BenchmarkResident is the scheduler's question about its idle programs,
// asked once per admission tick: what each still holds of its prompt, from
// the prompt's last block (FindResident, and replay's answerHoldings). 64
// sessions of 2,048 blocks (a 128k-token prompt in 64-token blocks) on
// four workers, stored turn by turn in interleaved growing steps as a busy
// fleet stores them, so that a chain's nodes lie scattered over the slab.
// An op is one tick's questions about all 64 sessions.
func BenchmarkResident(b *testing.B) {
	const sessions, depth, step = 64, 2048, 64
	rng := rand.New(rand.NewPCG(1, 2))
	ix := New(Config{})
	chains := make([][]kv.BlockHash, sessions)
	for s := range chains {
		chains[s] = make([]kv.BlockHash, depth)
		for k := range chains[s] {
			chains[s][k] = kv.BlockHash(rng.Uint64())
		}
	}
	for at := 0; at < depth; at += step {
		for _, s := range rng.Perm(sessions) {
			ev := kv.Event{Kind: kv.Stored, Blocks: chains[s][at : at+step]}
			if at > 0 {
				ev.Parent = chains[s][at-1]
			}
			if err := ix.Apply("w"+strconv.Itoa(s%4), 0, ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	var m Matches
	var buf []kv.BlockHash
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for s := range chains {
			var used int
			buf, used = ix.Resident(&m, chains[s][depth-1:], buf)
			if used != 0 || len(buf) != depth {
				b.Fatalf("session %d: anchor %d, chain of %d", s, used, len(buf))
			}
		}
	}
}
