package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"switchyard.dev/services/servicekit"
)

func TestAPIKeysFromFlagsAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	digest := func(k string) string { d := sha256.Sum256([]byte(k)); return hex.EncodeToString(d[:]) }
	os.WriteFile(path, []byte("# sha256(key) tenant\n"+digest("k1")+" acme\n\nsha256:"+digest("k2")+" bravo # comment\n"+digest("op")+" *\n"), 0o600)
	keys, err := newKeyring(map[string]string{"k3": "charlie"}, path)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"k1": "acme", "k2": "bravo", "k3": "charlie", "op": OperatorTenant} {
		if got, ok := keys.lookup(key); !ok || got != want {
			t.Errorf("lookup(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "k4", digest("k1")} {
		if got, ok := keys.lookup(key); ok {
			t.Errorf("lookup(%q) = %q: only the keys themselves authenticate", key, got)
		}
	}
	for _, bad := range []string{"k1 acme\n", digest("k1") + " bad:tenant\n", digest("k1") + "\n",
		digest("k1") + " acme\n" + digest("k1") + " *\n"} {
		os.WriteFile(path, []byte(bad), 0o600)
		if _, err := newKeyring(nil, path); err == nil {
			t.Errorf("keys file %q accepted (a plain key, a bad tenant, no tenant or a key of two tenants must be refused)", bad)
		}
	}
	// One key for two tenants, across the flag and the file, is refused;
	// the same pair twice is not.
	os.WriteFile(path, []byte(digest("k1")+" acme\n"+digest("k1")+" acme\n"), 0o600)
	if _, err := newKeyring(map[string]string{"k1": "acme"}, path); err != nil {
		t.Errorf("a key given twice for one tenant: %v", err)
	}
	if _, err := newKeyring(map[string]string{"k1": "bravo"}, path); err == nil {
		t.Error("a key of the file given for another tenant on the command line was accepted")
	}
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--api-keys", "a:t1, b:t2", "--block-size", "32", "--model", "qwen", "--model-aliases", " claude-opus-4-8, gpt-5-codex,"}); err != nil {
		t.Fatal(err)
	}
	if cfg.APIKeys["a"] != "t1" || cfg.APIKeys["b"] != "t2" || cfg.BlockSize != 32 || cfg.Model != "qwen" ||
		!reflect.DeepEqual(cfg.ModelAliases, []string{"claude-opus-4-8", "gpt-5-codex"}) {
		t.Fatalf("%+v", cfg)
	}
	if err := fs.Parse([]string{"--api-keys", "nocolon"}); err == nil {
		t.Fatal("bad pair accepted")
	}
	for _, dup := range [][]string{{"--api-keys", "k:alice,k:bob"}, {"--api-keys", "a:bob"}} {
		if err := fs.Parse(dup); err == nil {
			t.Errorf("%v: a key of two tenants accepted", dup)
		}
	}
	if !reflect.DeepEqual((Config{}).withDefaults(), DefaultConfig()) {
		t.Fatal("zero config must mean defaults")
	}
}

func TestSessionFinalDropsState(t *testing.T) {
	m := newMesh(t, nil)
	resp := post(t, m.url+"/v1/chat/completions", turn1, "x-dynamo-session-id", "fin")
	readAll(t, resp.Body)
	m.waitFinish(t)
	key := sessionKey(AnonymousTenant, "fin")
	if kept(m.svc.sessions, key, promptOf) == nil {
		t.Fatal("no state after turn 1")
	}
	resp = post(t, m.url+"/v1/chat/completions", turn1, "x-dynamo-session-id", "fin", "x-dynamo-session-final", "true")
	readAll(t, resp.Body)
	m.waitFinish(t)
	if kept(m.svc.sessions, key, promptOf) != nil {
		t.Fatal("state kept after the final turn")
	}
	if !m.sched.lastRoute().GetAgent().GetSessionFinal() {
		t.Fatal("session_final not passed to the scheduler")
	}
}

// TestMigrationLimitBounded: a limit past what the scheduler takes in one
// route's exclusions is refused at start, not met as a 500 on the move
// past it.
func TestMigrationLimitBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MigrationLimit = maxMigrations + 1
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "--migration-limit") {
		t.Fatalf("New with --migration-limit %d: %v", cfg.MigrationLimit, err)
	}
}

// TestMainRefusesBadFlagValues: a flag value the frontend would otherwise
// replace by its default without a word stops it at start, naming the flag
// (or the variable it came from); the zeros the help gives a meaning of
// their own start it.
func TestMainRefusesBadFlagValues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	base := []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", ""}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--block-size", "-5"}, `invalid value "-5" for flag -block-size: want > 0`},
		{[]string{"--route-timeout", "-1s"}, `invalid value "-1s" for flag -route-timeout: want > 0`},
		{[]string{"--stream-idle-timeout", "0s"}, "-stream-idle-timeout: want > 0"},
		{[]string{"--max-body-bytes", "-1"}, "-max-body-bytes: want > 0"},
		{[]string{"--max-context-tokens", "0"}, "-max-context-tokens: want > 0"},
		{[]string{"--default-max-tokens", "-1"}, "-default-max-tokens: want ≥ 0"},
		{[]string{"--max-sessions", "-1"}, "-max-sessions: want > 0"},
		{[]string{"--max-inflight-requests", "0"}, "-max-inflight-requests: want > 0"},
		{[]string{"--tenant-rps", "-1"}, "-tenant-rps: want ≥ 0"},
		{[]string{"--tenant-rps", "NaN"}, "-tenant-rps: want ≥ 0"},
		{[]string{"--tenant-streams", "-2"}, "-tenant-streams: want ≥ 0"},
	} {
		if err := Main(ctx, append(base, tt.args...)); !servicekit.IsUsage(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tt.args, err, tt.want)
		}
	}
	t.Setenv("SWITCHYARD_ROUTE_TIMEOUT", "-1s")
	if err := Main(ctx, base); err == nil || !strings.Contains(err.Error(), "SWITCHYARD_ROUTE_TIMEOUT") {
		t.Errorf("SWITCHYARD_ROUTE_TIMEOUT=-1s: %v", err)
	}
	t.Setenv("SWITCHYARD_ROUTE_TIMEOUT", "1m")
	zeros := []string{"--tenant-rps", "0", "--tenant-streams", "0", "--body-read-timeout", "0", "--migration-limit", "0", "--route-retry-budget", "0"}
	if err := Main(ctx, append(base, zeros...)); err != nil {
		t.Errorf("%v: %v", zeros, err)
	}
}
