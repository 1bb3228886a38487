package routing

import (
	"math"
	"testing"
)

func TestCostFunction(t *testing.T) {
	type tc struct {
		name     string
		mod      func(*Config)
		isl      int
		overlap  Overlap
		in       costInput
		minPre   int
		credit   float64
		adjusted float64
		decode   float64
		cost     float64
	}
	// ISL 160 tokens = 10 blocks of 16 throughout.
	tests := []tc{
		{name: "cold idle worker", isl: 160, credit: 0, adjusted: 10, decode: 10, cost: 20},
		{name: "device overlap credits one block each", isl: 160, overlap: Overlap{Device: 4}, credit: 4, adjusted: 6, decode: 10, cost: 16},
		{name: "host extension at 0.75", isl: 160, overlap: Overlap{HostExt: 4}, credit: 3, adjusted: 7, decode: 10, cost: 17},
		{name: "disk extension at 0.25", isl: 160, overlap: Overlap{DiskExt: 4}, credit: 1, adjusted: 9, decode: 10, cost: 19},
		{name: "all tiers add", isl: 160, overlap: Overlap{Device: 2, HostExt: 4, DiskExt: 4}, credit: 6, adjusted: 4, decode: 10, cost: 14},
		{name: "shared pool off by default", isl: 160, overlap: Overlap{SharedBeyondDevice: 4}, credit: 0, adjusted: 10, decode: 10, cost: 20},
		{name: "shared pool at 0.5", mod: func(c *Config) { c.SharedCacheMultiplier = 0.5 }, isl: 160,
			overlap: Overlap{SharedBeyondDevice: 4}, credit: 2, adjusted: 8, decode: 10, cost: 18},
		{name: "credit never makes prefill negative", isl: 160, overlap: Overlap{Device: 30}, credit: 30, adjusted: 0, decode: 10, cost: 10},
		{name: "queued prefill raises raw blocks", isl: 160, in: costInput{activePrefillTokens: 32}, credit: 0, adjusted: 12, decode: 10, cost: 22},
		{name: "active blocks add to decode", isl: 160, in: costInput{decodeBlocks: 7}, credit: 0, adjusted: 10, decode: 17, cost: 27},
		{name: "active requests weigh when asked", mod: func(c *Config) { c.DecodeActiveRequestWeight = 2 }, isl: 160,
			in: costInput{activeRequests: 3}, credit: 0, adjusted: 10, decode: 10, cost: 26},
		{name: "active requests free by default", isl: 160, in: costInput{activeRequests: 3}, credit: 0, adjusted: 10, decode: 10, cost: 20},
		{name: "prefill load scale", mod: func(c *Config) { c.PrefillLoadScale = 2 }, isl: 160, overlap: Overlap{Device: 4},
			credit: 4, adjusted: 6, decode: 10, cost: 22},
		{name: "overlap credit scale", mod: func(c *Config) { c.OverlapScoreCredit = 0.5 }, isl: 160, overlap: Overlap{Device: 4},
			credit: 2, adjusted: 8, decode: 10, cost: 18},
		// decay = 1/(1 + 1·(160−0)/16/10) = 0.5 → device credit 4·0.5 = 2.
		{name: "decay halves credit behind a long queue", mod: func(c *Config) { c.OverlapScoreCreditDecay = 1 }, isl: 160,
			overlap: Overlap{Device: 4}, in: costInput{activePrefillTokens: 160}, credit: 2, adjusted: 18, decode: 10, cost: 28},
		{name: "decay spares the least busy worker", mod: func(c *Config) { c.OverlapScoreCreditDecay = 1 }, isl: 160,
			overlap: Overlap{Device: 4}, in: costInput{activePrefillTokens: 160}, minPre: 160, credit: 4, adjusted: 16, decode: 10, cost: 26},
		{name: "decay leaves host credit alone", mod: func(c *Config) { c.OverlapScoreCreditDecay = 1 }, isl: 160,
			overlap: Overlap{HostExt: 4}, in: costInput{activePrefillTokens: 160}, credit: 3, adjusted: 17, decode: 10, cost: 27},
		{name: "partial block rounds up in decode", isl: 165, credit: 0, adjusted: 165.0 / 16, decode: 11, cost: 165.0/16 + 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.mod != nil {
				tt.mod(&cfg)
			}
			req := Request{ISLTokens: tt.isl}
			c := Candidate{Worker: "w", Overlap: tt.overlap}
			var s Score
			score(&s, &cfg, &req, 16, &c, tt.in, tt.minPre)
			for _, f := range []struct {
				what      string
				got, want float64
			}{{"credit", s.Credit, tt.credit}, {"adjusted", s.AdjustedPrefillBlocks, tt.adjusted},
				{"decode", s.DecodeBlocks, tt.decode}, {"cost", s.Cost, tt.cost}} {
				if math.Abs(f.got-f.want) > 1e-9 {
					t.Errorf("%s = %v, want %v (score %+v)", f.what, f.got, f.want, s)
				}
			}
		})
	}
}

func TestDefaultConfigMatchesDynamo(t *testing.T) {
	c := DefaultConfig()
	if c.OverlapScoreCredit != 1 || c.OverlapScoreCreditDecay != 0 || c.PrefillLoadScale != 1 ||
		c.HostCacheHitWeight != 0.75 || c.DiskCacheHitWeight != 0.25 || c.SharedCacheMultiplier != 0 ||
		c.DecodeActiveRequestWeight != 0 || c.Temperature != 0 {
		t.Fatalf("defaults drifted from dynamo.md §3.1: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.HostCacheHitWeight = -1 },
		func(c *Config) { c.Temperature = -0.1 },
		func(c *Config) { c.AffinityMode = "sticky" },
		func(c *Config) { c.Policy = "random" },
	}
	for i, mod := range bad {
		c := DefaultConfig()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: want an error for %+v", i, c)
		}
	}
}
