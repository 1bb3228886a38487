package sessionindex

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"switchyard.dev/pkg/kv"
)

// agentTurns builds the Stored updates of sessions that each grow one chain
// turn by turn on a shared system prompt, like coding-agent traffic.
func agentTurns(sessions, turns, blocksPerTurn int) [][]kv.BlockHash {
	var out [][]kv.BlockHash
	for s := 0; s < sessions; s++ {
		for t := 0; t < turns; t++ {
			b := make([]kv.BlockHash, blocksPerTurn)
			for i := range b {
				b[i] = kv.BlockHash(uint64(s+1)<<32 | uint64(t*blocksPerTurn+i+1))
			}
			out = append(out, b)
		}
	}
	return out
}

func BenchmarkUpdateFromStored(b *testing.B) {
	for _, sessions := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			const turns, per = 8, 16
			ups := agentTurns(sessions, turns, per)
			names := make([]string, sessions)
			for i := range names {
				names[i] = "s" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(ups) == 0 {
					b.StopTimer()
					x := New(Config{})
					b.StartTimer()
					benchIndex = x
				}
				k := i % len(ups)
				s, t := k/turns, k%turns
				parent := kv.BlockHash(0)
				if t > 0 {
					parent = ups[k-1][per-1]
				}
				if err := benchIndex.UpdateFromStored(names[s], "w"+strconv.Itoa(s%4), parent, ups[k], time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var benchIndex *Index

func BenchmarkLineage(b *testing.B) {
	for _, depth := range []int{64, 1024, 8192} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			x := New(Config{})
			blocks := make([]kv.BlockHash, depth)
			for i := range blocks {
				blocks[i] = kv.BlockHash(i + 1)
			}
			if err := x.UpdateFromStored("s", "w", 0, blocks, time.Time{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if len(x.Lineage("s", "w")) != 1 {
					b.Fatal("no lineage")
				}
			}
		})
	}
}

func BenchmarkApplyDemoteRemove(b *testing.B) {
	// One session's 64-block chain demoted to host and then evicted block by
	// block from the tail: the Removed path with its residency check.
	x := New(Config{})
	blocks := make([]kv.BlockHash, 64)
	for i := range blocks {
		blocks[i] = kv.BlockHash(i + 1)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%64 == 0 {
			_ = x.Apply("w", kv.Event{Kind: kv.Stored, Tier: kv.TierDevice, Blocks: blocks, SessionID: "s"}, time.Time{})
		}
		_ = x.Apply("w", kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: blocks[63-i%64 : 64-i%64]}, time.Time{})
	}
}

// BenchmarkUpdateFromStoredDeepChain is one long agent session (100k
// tokens: a chain about 6,000 blocks deep) whose every turn stores a few
// dozen blocks extending its tip: the cost of an update must not grow with
// the depth of the chain it extends. The index is rebuilt outside the timer
// every resetEvery turns, so the depth stays between 6,000 and 7,920.
func BenchmarkUpdateFromStoredDeepChain(b *testing.B) {
	const depth, per, resetEvery = 6000, 30, 64
	base := make([]kv.BlockHash, depth)
	for i := range base {
		base[i] = kv.BlockHash(i + 1)
	}
	turns := make([][]kv.BlockHash, resetEvery)
	for t := range turns {
		turns[t] = make([]kv.BlockHash, per)
		for i := range turns[t] {
			turns[t][i] = kv.BlockHash(depth + t*per + i + 1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := i % resetEvery
		if t == 0 {
			b.StopTimer()
			benchIndex = New(Config{})
			if err := benchIndex.UpdateFromStored("s", "w", 0, base, time.Time{}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		parent := base[depth-1]
		if t > 0 {
			parent = turns[t-1][per-1]
		}
		if err := benchIndex.UpdateFromStored("s", "w", parent, turns[t], time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOffloadTailFirst is one session's chain (100k tokens: about
// 1,600 blocks) evicted from the device tail first, each block offloaded to
// host memory as it goes: the engine reports a one-block Stored on the host
// tier (session-tagged) between each two evictions, so every block arrives as
// an update of its own, whose tail lies deep under the session's frontier.
// Reported per chain: the cost must grow with the chain, not with its square.
func BenchmarkOffloadTailFirst(b *testing.B) {
	for _, depth := range []int{400, 1600} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			blocks := make([]kv.BlockHash, depth)
			for i := range blocks {
				blocks[i] = kv.BlockHash(i + 1)
			}
			b.ReportAllocs()
			for b.Loop() {
				x := New(Config{})
				_ = x.Apply("w", kv.Event{Kind: kv.Stored, Tier: kv.TierDevice, Blocks: blocks, SessionID: "s"}, time.Time{})
				for i := depth - 1; i >= 0; i-- {
					var parent kv.BlockHash
					if i > 0 {
						parent = blocks[i-1]
					}
					if err := x.Apply("w", kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: parent, Blocks: blocks[i : i+1], SessionID: "s"}, time.Time{}); err != nil {
						b.Fatal(err)
					}
					_ = x.Apply("w", kv.Event{Kind: kv.Removed, Tier: kv.TierDevice, Blocks: blocks[i : i+1]}, time.Time{})
				}
				benchIndex = x
			}
		})
	}
}

// BenchmarkChainReportedLeafFirst builds one session's chain from its leaf
// up: the leaf stored as a root, then each block above it stored under a
// parent the index does not know yet, which reconnects the chain by
// grafting the former root under it. Reported per chain: the cost must grow
// with the chain, not with its square (each graft joins the new block's
// path to the chain's instead of leaving one path per block).
func BenchmarkChainReportedLeafFirst(b *testing.B) {
	for _, depth := range []int{400, 1600} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x := New(Config{})
				if err := x.UpdateFromStored("s", "w", 0, []kv.BlockHash{kv.BlockHash(depth)}, time.Time{}); err != nil {
					b.Fatal(err)
				}
				for i := depth; i > 1; i-- {
					if err := x.UpdateFromStored("s", "w", kv.BlockHash(i-1), []kv.BlockHash{kv.BlockHash(i)}, time.Time{}); err != nil {
						b.Fatal(err)
					}
				}
				benchIndex = x
			}
		})
	}
}
