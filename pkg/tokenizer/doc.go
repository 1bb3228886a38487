// Package tokenizer turns prompt text into the token ids that an inference
// engine (vLLM, SGLang: Hugging Face tokenizers) computes for the same text,
// and ids back into text, in pure Go. Block hashes, prefix-cache hits and
// token counts all depend on these ids being exactly the engine's, so the
// package only loads tokenizers it can reproduce bit for bit, and its tests
// compare against the Hugging Face reference on a mixed corpus and fuzzed
// strings.
//
// It covers byte-level BPE with the Qwen2/2.5/3 and Llama 3 split patterns:
// added tokens are matched first, the rest is NFC-normalized (Qwen3),
// pre-tokenized by a hand-written scanner and merged by rank BPE with
// rank = token id. Default() is the real Qwen3 vocabulary, embedded as a
// compact digest (qwen3.tok.gz) so nothing is downloaded. EncodeIncremental
// re-encodes only the new end of a prompt that extends an encoded one (agent
// sessions), cutting at added tokens, the only places where that is exact.
//
// It must never guess: a tokenizer.json it cannot reproduce exactly is
// refused at Load, not approximated. It holds no goroutines and no I/O beyond
// the reader Load is given.
package tokenizer
