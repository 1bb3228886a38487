package kvhintemitter

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"switchyard.dev/pkg/hints"
)

func parseFlags(args ...string) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("kvhint-emitter", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	return cfg, fs.Parse(args)
}

// A value outside what the help says a flag takes, or one the defaults
// would replace, is refused by name when parsed, not taken in silence.
func TestFlagsRefuseValuesOutOfRange(t *testing.T) {
	for _, args := range [][]string{
		{"--tick", "-1s"}, {"--tick", "0s"}, {"--lineage-timeout", "-1s"}, {"--apply-timeout", "0s"},
		{"--recent-hints", "-1"}, {"--default-tool-time", "0s"}, {"--share-max-blocks", "0"}, {"--retain-ttl", "-1m"},
		{"--hint-rate", "-1"}, {"--block-burst", "-1"}, {"--hint-rate", "NaN"},
		{"--retain-priority", "500"}, {"--retain-priority", "-1"}, {"--demote-min-kv-usage", "2"}, {"--demote-min-kv-usage", "-0.1"},
	} {
		_, err := parseFlags(args...)
		if err == nil || !strings.Contains(err.Error(), "-"+strings.TrimPrefix(args[0], "--")+":") {
			t.Errorf("%v: %v, want refused naming the flag", args, err)
		}
	}
}

// The bottom of each range the help gives is honoured, not replaced by the
// default: a retain is sent at priority 0.
func TestFlagsTakeTheBottomOfTheirRange(t *testing.T) {
	cfg, err := parseFlags("--retain-priority", "0", "--demote-min-kv-usage", "0", "--hint-rate", "0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hints.DemoteMinKVUsage != 0 || cfg.Hints.HintRate != 0 {
		t.Fatalf("%+v", cfg.Hints)
	}
	demote := hints.Action{Policy: hints.PolicyDemotePaused, Kind: hints.KindDemote, Worker: "w", Session: "s"}
	retainOnly := hints.Support{Known: true, Caps: []hints.Capability{{Kind: hints.KindRetain, MaxPriority: 100}}}
	if got, ok := hints.Nearest(demote, retainOnly, cfg.Hints); !ok || got.Kind != hints.KindRetain || got.Priority != 0 {
		t.Fatalf("--retain-priority 0: sent %+v, %v", got, ok)
	}
}

// A rate whose burst is below one token would let no hint through: refused
// at start, naming both flags.
func TestARateNeedsABurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	base := []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", ""}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hint-rate", "5", "--hint-burst", "0"}, "--hint-burst 0: must be at least 1 while --hint-rate is set"},
		{[]string{"--block-rate", "100", "--block-burst", "0.5"}, "--block-burst 0.5: must be at least 1 while --block-rate is set"},
	} {
		if err := Main(ctx, append(base, tc.args...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if err := Main(ctx, append(base, "--hint-rate", "0", "--hint-burst", "0")); err != nil {
		t.Errorf("no rate, no burst: %v", err)
	}
}
