package mesh_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"switchyard.dev/internal/mesh"
)

// With 3 schedulers, 2 frontends and 2 flash indexers, a session's turns
// alternate between the frontends and still stay on one worker, each after
// the first finding its prefix cached.
func TestReplicatedMeshKeepsSessionsOnTheirWorker(t *testing.T) {
	m := startMesh(t, func(c *mesh.Config) { c.Schedulers, c.Frontends, c.FlashIndexers = 3, 2, 2 })
	var fronts []string
	for _, ep := range m.Endpoints {
		if ep.Service == "frontend" {
			fronts = append(fronts, "http://"+ep.HTTP)
		}
	}
	if len(fronts) != 2 {
		t.Fatalf("%d frontends", len(fronts))
	}
	for s := range 6 {
		session := fmt.Sprint("replicated-", s)
		history := []message{{Role: "system", Content: "You are a careful coding agent. Read files before you change them, and explain every change you make in one short sentence."}}
		worker := ""
		for turn := range 4 {
			history = append(history, message{Role: "user", Content: fmt.Sprintf("Step %d of the task: look at the next file and say what it does.", turn)})
			resp, body := postChat(t, fronts[turn%2], session, map[string]any{"model": "switchyard-sim", "max_tokens": 16, "messages": history})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s turn %d: status %d: %s", session, turn, resp.StatusCode, body)
			}
			var out chatResponse
			if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) != 1 {
				t.Fatalf("%s turn %d: bad body %s", session, turn, body)
			}
			w := resp.Header.Get("X-Switchyard-Worker")
			if turn == 0 {
				worker = w
			} else if w != worker {
				t.Fatalf("%s turn %d went to %s, its first to %s", session, turn, w, worker)
			} else if out.Usage.PromptTokensDetails.CachedTokens == 0 {
				t.Fatalf("%s turn %d: nothing cached: %s", session, turn, body)
			}
			history = append(history, message{Role: "assistant", Content: out.Choices[0].Message.Content})
		}
		// Either frontend's admin view shows the whole session: its four
		// turns, though each frontend served two. The last turn's finish
		// is a notice that may still be on its way to the scheduler when
		// the client has the answer: the view has it within moments.
		for _, f := range fronts {
			var got struct {
				Session struct {
					Turns        int    `json:"turns"`
					LastWorkerID string `json:"lastWorkerId"`
					CachedTokens string `json:"cachedTokens"`
				} `json:"session"`
				SchedulersMissing int `json:"schedulersMissing"`
			}
			whole := func() bool {
				getJSON(t, f+"/v1/admin/sessions/"+session, &got)
				return got.Session.Turns == 4 && got.Session.LastWorkerID == worker && got.Session.CachedTokens != "" && got.SchedulersMissing == 0
			}
			for deadline := time.Now().Add(5 * time.Second); !whole(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s through %s: %+v", session, f, got)
				}
			}
		}
	}
}

// getJSON decodes the 200 answer of a GET into out.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
