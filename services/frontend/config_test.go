package frontend

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestAPIKeysFromFlagsAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("# key tenant\nk1 acme\n\nk2 bravo # comment\n"), 0o600)
	keys, err := loadKeysFile(path)
	if err != nil || keys["k1"] != "acme" || keys["k2"] != "bravo" || len(keys) != 2 {
		t.Fatalf("%v %v", keys, err)
	}
	os.WriteFile(path, []byte("k1 bad:tenant\n"), 0o600)
	if _, err := loadKeysFile(path); err == nil {
		t.Fatal("a tenant with ':' must be refused")
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
	if m.svc.sessions.prep(key) == nil {
		t.Fatal("no state after turn 1")
	}
	resp = post(t, m.url+"/v1/chat/completions", turn1, "x-dynamo-session-id", "fin", "x-dynamo-session-final", "true")
	readAll(t, resp.Body)
	m.waitFinish(t)
	if m.svc.sessions.prep(key) != nil {
		t.Fatal("state kept after the final turn")
	}
	if !m.sched.lastRoute().GetAgent().GetSessionFinal() {
		t.Fatal("session_final not passed to the scheduler")
	}
}
