// Command tokdigest converts a Hugging Face tokenizer.json into the compact
// digest the tokenizer package embeds, after the same checks Load makes.
//
//	go run ./tokenizer/cmd/tokdigest -name qwen3 -in tokenizer.json -out tokenizer/qwen3.tok.gz
package main

import (
	"flag"
	"fmt"
	"os"

	"switchyard.dev/pkg/tokenizer"
	"switchyard.dev/pkg/tokenizer/internal/vocabfile"
)

func main() {
	in := flag.String("in", "", "tokenizer.json to read")
	out := flag.String("out", "", "digest to write")
	name := flag.String("name", "", "name the tokenizer reports")
	flag.Parse()
	if err := run(*in, *out, *name); err != nil {
		fmt.Fprintln(os.Stderr, "tokdigest:", err)
		os.Exit(1)
	}
}

func run(in, out, name string) error {
	if in == "" || out == "" || name == "" {
		return fmt.Errorf("-in, -out and -name are required")
	}
	// Load runs every check, including the self-encoding one that ParseHF
	// alone does not.
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := tokenizer.Load(f); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	spec, err := vocabfile.ParseHF(f)
	if err != nil {
		return err
	}
	spec.Name = name
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := spec.WriteDigest(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
