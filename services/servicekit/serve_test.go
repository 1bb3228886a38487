package servicekit

import (
	"context"
	"errors"
	"flag"
	"testing"
)

type greeterConfig struct{ Greeting string }

func (c *greeterConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Greeting, "greeting", c.Greeting, "what to say")
}

type greeter struct{}

func (greeter) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// ServeConfig hands the service the config its flags parsed to, and a
// service that cannot be built ends it with that error.
func TestServeConfigBuildsFromParsedFlags(t *testing.T) {
	errNo := errors.New("not built")
	var got greeterConfig
	err := ServeConfig(context.Background(), "greeter", []string{"--greeting=hi", "--grpc-addr=127.0.0.1:0", "--http-addr="},
		greeterConfig{Greeting: "hello"}, func(c greeterConfig, _ *Server) (greeter, error) {
			got = c
			return greeter{}, errNo
		})
	if !errors.Is(err, errNo) || got.Greeting != "hi" {
		t.Fatalf("ServeConfig = %v with greeting %q, want %v with %q", err, got.Greeting, errNo, "hi")
	}
}
