package mesh_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"switchyard.dev/internal/mesh"
)

// warnings keeps the WARN and ERROR records logged once stopping is set.
type warnings struct {
	slog.Handler
	stopping *atomic.Bool
	mu       *sync.Mutex
	got      *[]string
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if w.stopping.Load() && r.Level >= slog.LevelWarn {
		w.mu.Lock()
		*w.got = append(*w.got, r.Message)
		w.mu.Unlock()
	}
	return nil
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return warnings{w.Handler.WithAttrs(as), w.stopping, w.mu, w.got}
}

func (w warnings) WithGroup(g string) slog.Handler {
	return warnings{w.Handler.WithGroup(g), w.stopping, w.mu, w.got}
}

// A whole mesh stopping in order (Ctrl-C on switchyard up) is not a fault:
// no service logs a warning while it stops, because none sees a peer it
// depends on leave first. Two schedulers and a pool, so that every kind of
// service is in it.
func TestStopsWithoutWarnings(t *testing.T) {
	var stopping atomic.Bool
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := mesh.DefaultConfig()
	cfg.FrontendHTTPAddr = "127.0.0.1:0"
	cfg.SpeedUp = 20
	cfg.Schedulers, cfg.PoolPages = 2, 64
	cfg.Logger = slog.New(warnings{slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}), &stopping, &mu, &got})
	m, err := mesh.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.Endpoint("frontend").HTTP
	for i := range 3 {
		if resp, body := postChat(t, base, fmt.Sprintf("stop-%d", i), map[string]any{"model": "switchyard-sim", "max_tokens": 4,
			"messages": []message{{Role: "user", Content: "Say which file starts the server."}}}); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	stopping.Store(true)
	cancel()
	if err := m.Wait(); err != nil {
		t.Fatalf("mesh stopped with: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Errorf("%d warnings while the mesh stopped, e.g. %q", len(got), got[:min(len(got), 5)])
	}
}
