package flashindexer

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// parseFlags parses args as the service's command line would set cfg.
func parseFlags(args ...string) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("flash-indexer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	return cfg, fs.Parse(args)
}

// A value withDefaults would replace by its default is refused by name
// when parsed, not taken in silence.
func TestFlagsRefuseValuesTheDefaultsWouldReplace(t *testing.T) {
	for _, args := range [][]string{
		{"--max-blocks", "-1"}, {"--max-blocks", "0"}, {"--block-size", "0"},
		{"--pool-max-objects", "-5"}, {"--max-predicted-blocks", "0"},
		{"--predict-ttl", "-1s"}, {"--predict-max-ttl", "0s"}, {"--chain-cache-hashes", "-1"},
	} {
		_, err := parseFlags(args...)
		if err == nil || !strings.Contains(err.Error(), "-"+strings.TrimPrefix(args[0], "--")+":") {
			t.Errorf("%v: %v, want refused naming the flag", args, err)
		}
	}
	cfg, err := parseFlags("--max-blocks", "7", "--chain-cache-hashes", "0", "--predict-ttl", "2s", "--stale-after", "-1s")
	if err != nil || cfg.MaxBlocks != 7 || cfg.ChainCacheHashes != 0 || cfg.PredictTTL != 2*time.Second || cfg.StaleAfter != -time.Second {
		t.Fatalf("good values: %+v, %v", cfg, err)
	}
}

// --predict-max-ttl caps every prediction: one below --predict-ttl is kept
// (PredictRoute cuts the default life to it), not raised to a minute.
func TestPredictMaxTTLBelowTheDefaultLifeStands(t *testing.T) {
	cfg, err := parseFlags("--predict-max-ttl", "1s")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.withDefaults().PredictMaxTTL; got != time.Second {
		t.Fatalf("--predict-max-ttl 1s became %v", got)
	}
	// A Go caller's unset cap still takes the default, or the life if longer.
	if got := (Config{PredictTTL: 2 * time.Minute}).withDefaults().PredictMaxTTL; got != 2*time.Minute {
		t.Fatalf("unset cap with a 2m life: %v", got)
	}
	if got := (Config{}).withDefaults().PredictMaxTTL; got != DefaultConfig().PredictMaxTTL {
		t.Fatalf("unset cap: %v", got)
	}
}
