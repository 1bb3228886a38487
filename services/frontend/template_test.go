package frontend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"switchyard.dev/pkg/chat"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
)

// A model template given as tokenizer_config.json is used for rendering; a
// Jinja transcription of the default template yields the very same blocks.
func TestChatTemplateFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"bos_token":null,"eos_token":{"content":"<|im_end|>"},"chat_template":"{%- for m in messages -%}{{ \"<|im_start|>\" + m.role + \"\\n\" + m.content + \"<|im_end|>\\n\" }}{%- endfor -%}{%- if add_generation_prompt -%}{{ \"<|im_start|>assistant\\n\" }}{%- endif -%}"}`
	path := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	hashes := map[bool][]uint64{}
	for _, custom := range []bool{false, true} {
		m := newMesh(t, func(c *Config, _ *fakeShim) {
			if custom {
				c.ChatTemplate = path
			}
		})
		resp := post(t, m.url+"/v1/chat/completions", turn1)
		if b := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		m.waitFinish(t)
		hashes[custom] = m.sched.lastRoute().GetBlockHashes()
	}
	if len(hashes[true]) == 0 || !slices.Equal(hashes[true], hashes[false]) {
		t.Fatalf("template from config renders differently: %v vs %v", hashes[true], hashes[false])
	}
	if _, err := loadTemplate(filepath.Join(dir, "missing.jinja"), nil); err == nil {
		t.Fatal("missing file accepted")
	}
}

// --chat-template qwen3 serves the embedded Qwen3 template: the routed
// prompt is the tokens of exactly what that template renders.
func TestBuiltinQwen3Template(t *testing.T) {
	const body = `{"model":"m","tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"messages":[{"role":"user","content":"Run ls"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.go\nb.go"}]}`
	m := newMesh(t, func(c *Config, _ *fakeShim) { c.ChatTemplate = BuiltinQwen3Template })
	resp := post(t, m.url+"/v1/chat/completions", body)
	if b := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	m.waitFinish(t)

	req, _, err := chat.DecodeChatCompletion([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	conv, err := req.Conversation()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := loadTemplate(BuiltinQwen3Template, tokenizer.Default())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tmpl.Render(conv, true)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.String(); !strings.Contains(s, `{"name": "bash", "description": null, "parameters": {"type": "object"`) ||
		!strings.HasSuffix(s, "</tool_response><|im_end|>\n<|im_start|>assistant\n") {
		t.Fatalf("not the Qwen3 template:\n%s", s)
	}
	tk, _ := chat.Preprocess(tokenizer.Default(), kvhash.New(DefaultConfig().BlockSize, "", cacheSalt(AnonymousTenant)), p, nil)
	if got := m.sched.lastRoute().GetPromptTokens(); int(got) != len(tk.Tokens) {
		t.Fatalf("routed %d prompt tokens, the Qwen3 rendering has %d", got, len(tk.Tokens))
	}
}
