package sessionindexer

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// A value withDefaults would replace by its default is refused by name
// when parsed, not taken in silence.
func TestFlagsRefuseValuesTheDefaultsWouldReplace(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("session-prefix-indexer", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		return cfg, fs.Parse(args)
	}
	for _, args := range [][]string{{"--max-sessions", "-1"}, {"--max-sessions", "0"}, {"--match-wait", "-1s"}, {"--match-backlog", "0"}} {
		_, err := parse(args...)
		if err == nil || !strings.Contains(err.Error(), "-"+strings.TrimPrefix(args[0], "--")+":") {
			t.Errorf("%v: %v, want refused naming the flag", args, err)
		}
	}
	cfg, err := parse("--max-sessions", "3", "--match-wait", "1s", "--match-backlog", "2")
	if err != nil || cfg.MaxSessions != 3 || cfg.MatchWait != time.Second || cfg.MatchBacklog != 2 {
		t.Fatalf("good values: %+v, %v", cfg, err)
	}
}
