package tokenizer

import (
	"testing"
)

// BenchmarkEncode measures the ~100k-token agent prompt of the reference
// data (ChatML turns over Go prose, source and JSON) and its last 4 KB.
func BenchmarkEncode(b *testing.B) {
	tok := Default()
	prompt := referenceText(b, "prompt")
	suffix := prompt[len(prompt)-4096:]
	for _, bc := range []struct {
		name string
		text string
	}{{"prompt100k", prompt}, {"suffix4KB", suffix}} {
		b.Run(bc.name, func(b *testing.B) {
			n := len(tok.Encode(bc.text))
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				tok.Encode(bc.text)
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(n), "tokens")
		})
	}
}

// BenchmarkDefaultInit measures building the embedded Qwen3 tokenizer
// (what the first Default() call costs).
func BenchmarkDefaultInit(b *testing.B) {
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if _, err := loadDigest(qwen3Digest); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkFirstEncode is a process's first tokenization: building the
// embedded tokenizer, then encoding the 100k-token prompt with cold tables.
func BenchmarkFirstEncode(b *testing.B) {
	prompt := referenceText(b, "prompt")
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		t, err := loadDigest(qwen3Digest)
		if err != nil {
			b.Fatal(err)
		}
		t.Encode(prompt)
	}
	reportCPU(b, cpu)
}

// reportCPU adds the process CPU time per op since start (all threads, so
// GC work is included) as "cpu-ns/op".
func reportCPU(b *testing.B, start int64) {
	if start > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}
