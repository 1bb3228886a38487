package frontend

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
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
