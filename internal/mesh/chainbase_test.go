package mesh_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"switchyard.dev/internal/mesh"
	"switchyard.dev/services/servicekit/servicetest"
)

// Across the mesh, each turn of a growing session after its first sends
// its hashes on bases at every hop: the frontend names the chain its
// scheduler kept, the scheduler the chain its flash indexer kept, the
// frontend the prompt the worker's shim kept; no base is refused, and every
// answer is what the whole prompt gets (its cache hits included).
func TestChainBasesAcrossTheMesh(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) { c.Policy = "session_aware" })
	base := "http://" + m.Endpoint("frontend").HTTP
	msgs := []message{{Role: "system", Content: strings.Repeat("You are a careful coding agent working in a large repository. ", 30)}}
	const turns = 5
	for turn := range turns {
		msgs = append(msgs, message{Role: "user", Content: "Step " + strconv.Itoa(turn) + ": " + strings.Repeat("read the next file and say what it does; ", 6)})
		resp, body := postChat(t, base, "chains-1", map[string]any{"model": "switchyard-sim", "max_tokens": 8, "messages": msgs})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("turn %d: status %d: %s", turn, resp.StatusCode, body)
		}
		var out struct {
			Choices []struct {
				Message message `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("turn %d: %s (%v)", turn, body, err)
		}
		if turn > 0 && out.Usage.Details.Cached < out.Usage.PromptTokens/2 {
			t.Fatalf("turn %d: %d of %d prompt tokens cached", turn, out.Usage.Details.Cached, out.Usage.PromptTokens)
		}
		msgs = append(msgs, message{Role: "assistant", Content: out.Choices[0].Message.Content})
	}
	want := map[string]map[string]float64{
		"frontend":      {`switchyard_frontend_chain_bases_total{outcome="held"}`: turns - 1, `switchyard_frontend_prompt_bases_total{outcome="sent"}`: turns - 1},
		"scheduler":     {`switchyard_scheduler_chain_bases_total{hop="route",outcome="held"}`: turns - 1, `switchyard_scheduler_chain_bases_total{hop="find_matches",outcome="held"}`: turns - 1},
		"flash-indexer": {`switchyard_flash_indexer_chain_bases_total{outcome="held"}`: turns - 1},
	}
	for svc, samples := range want {
		text := getMetrics(t, m, svc)
		for name, v := range samples {
			if got := metricValue(text, name); got != v {
				t.Errorf("%s: %s = %v, want %v", svc, name, got, v)
			}
		}
		if strings.Contains(text, `outcome="not_held"`) {
			t.Errorf("%s refused a base:\n%s", svc, grepLines(text, "bases_total"))
		}
	}
}

func getMetrics(t *testing.T, m *mesh.Mesh, service string) string {
	t.Helper()
	return servicetest.Get(t, "http://"+m.Endpoint(service).HTTP+"/metrics")
}

// metricValue is the value of the sample named (labels included) in a
// Prometheus text exposition, -1 when there is none.
func metricValue(text, sample string) float64 {
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

func grepLines(text, substr string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, substr) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
