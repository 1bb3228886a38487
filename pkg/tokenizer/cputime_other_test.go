//go:build !linux

package tokenizer

func processCPU() int64 { return 0 }
