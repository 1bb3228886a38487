// Command protofake runs the PROTOCOL FAKE of a vLLM or SGLang server (see
// package protofake) as a process, to try the engine shim by hand without a
// GPU:
//
//	go run ./protofake/cmd/protofake -engine vllm
//	engine-shim --engine vllm --engine-url <url> --kv-events-endpoint <pub> --kv-replay-endpoint <replay>
//
// It is a test tool, not an engine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"switchyard.dev/services/engine-shim/protofake"
)

func main() {
	var cfg protofake.Config
	flag.StringVar(&cfg.Engine, "engine", protofake.VLLM, "protocol to imitate: vllm | sglang")
	flag.StringVar(&cfg.Model, "model", "fake-model", "model name served")
	flag.IntVar(&cfg.BlockSize, "block-size", 16, "engine tokens per block")
	flag.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", 1024, "cache capacity in blocks")
	flag.StringVar(&cfg.Topic, "topic", "", "ZMQ topic")
	flag.BoolVar(&cfg.MapEvents, "map-events", false, "encode events as maps (newer engines)")
	flag.BoolVar(&cfg.ByteHashes, "byte-hashes", false, "publish 32-byte hashes")
	flag.BoolVar(&cfg.TwoFrameReplay, "two-frame-replay", false, "reply to replays as [seq, payload]")
	flag.StringVar(&cfg.EventsAddr, "events-addr", "", "PUB listen address (default: a free loopback port)")
	flag.StringVar(&cfg.ReplayAddr, "replay-addr", "", "ROUTER listen address (default: a free loopback port)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := protofake.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "protofake:", err)
		os.Exit(1)
	}
	defer e.Close()
	fmt.Printf("PROTOCOL FAKE of %s (not an engine)\nurl %s\nkv-events-endpoint %s\nkv-replay-endpoint %s\n", cfg.Engine, e.URL(), e.EventsEndpoint(), e.ReplayEndpoint())
	<-ctx.Done()
}
