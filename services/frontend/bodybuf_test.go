package frontend

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"switchyard.dev/pkg/chat"
)

// Concurrent turns of one session, whose bodies extend, repeat and branch
// from one another, so that the session's kept body is replaced while
// other turns compare with it and its buffer goes back to the pool, prompt
// the engine exactly as the same bodies do with nothing reused. (Under
// -race a buffer read into while another request still reads it is also a
// reported race.)
func TestReusedBodyBuffersChangeNoPrompt(t *testing.T) {
	m := newMesh(t, nil)
	r := rand.New(rand.NewPCG(7, 11))
	words := strings.Fields("the agent reads a file then edits its function and runs the tests again before it commits")
	text := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(words[r.IntN(len(words))] + " ")
		}
		return b.String()
	}
	// A history of 40 messages; a body is one of its prefixes, its last
	// message sometimes replaced (a branch), some of them long.
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	history := []message{{Role: "system", Content: "You are a coding agent. " + text(200)}}
	for i := range 40 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		history = append(history, message{Role: role, Content: text(5 + r.IntN(400*(i%7)+5))})
	}
	var bodies []string
	for range 60 {
		msgs := slices.Clone(history[:2+2*r.IntN(20)])
		if r.IntN(3) == 0 {
			msgs[len(msgs)-1].Content = text(30)
		}
		b, err := json.Marshal(map[string]any{"model": "m", "max_tokens": 8, "messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}

	send := func(body, session string) (string, error) {
		req, err := http.NewRequest(http.MethodPost, m.url+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-dynamo-session-id", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var out struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d, %v", resp.StatusCode, err)
		}
		return out.ID, nil
	}
	type sent struct{ body, id string }
	var (
		mu     sync.Mutex
		shared []sent
		wg     sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range 30 {
				body := bodies[r.IntN(len(bodies))]
				id, err := send(body, "shared")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				shared = append(shared, sent{body, id})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	prompts := func() map[string][]uint32 {
		m.shim.mu.Lock()
		defer m.shim.mu.Unlock()
		out := map[string][]uint32{}
		for _, w := range m.shim.wholes {
			out[w.GetRequestId()] = w.GetTokenIds()
		}
		return out
	}
	alone := map[string]string{} // body → a request id with nothing reused
	for i, s := range shared {
		if _, ok := alone[s.body]; !ok {
			id, err := send(s.body, fmt.Sprint("alone-", i))
			if err != nil {
				t.Fatal(err)
			}
			alone[s.body] = id
		}
	}
	got := prompts()
	for _, s := range shared {
		if want := got[alone[s.body]]; len(want) == 0 || !slices.Equal(got[s.id], want) {
			t.Fatalf("%s: prompt of %d tokens, %d with nothing reused", s.id, len(got[s.id]), len(want))
		}
	}
}

// A buffer goes back to the pool only when its last holder releases it:
// its request, the table while it keeps the body, and a request comparing
// with the kept body while another replaces it.
func TestBodyBufferHolds(t *testing.T) {
	table := newSessionTable(8)
	var read func(body string, final bool, during func()) *bodyBuf
	read = func(body string, final bool, during func()) *bodyBuf {
		buf := newBodyBuf(0)
		buf.b = append(buf.b, body...)
		if err := reuseBody(table, "s", final, buf, func(prev *chat.PrevBody) (*chat.PrevBody, error) {
			if during != nil {
				during()
			}
			_, next, err := chat.DecodeChatCompletion(buf.b, prev)
			return next, err
		}); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	first := read(`{"model":"m","messages":[{"role":"user","content":"a"}]}`, false, nil)
	if n := first.refs.Load(); n != 2 {
		t.Fatalf("the request and the table hold the first body %d times", n)
	}
	first.release() // its request ends
	second := read(`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, false, func() {
		// While the second request compares with the first body, a third
		// replaces the session's entry.
		read(`{"model":"m","messages":[{"role":"user","content":"x"}]}`, false, nil).release()
		if n := first.refs.Load(); n != 1 {
			t.Fatalf("the first body is held %d times while a request compares with it", n)
		}
	})
	if n := first.refs.Load(); n != 0 {
		t.Fatalf("compared and replaced, the first body is held %d times", n)
	}
	final := read(`{"model":"m","messages":[{"role":"user","content":"c"}]}`, true, nil)
	if n, m := second.refs.Load(), final.refs.Load(); n != 1 || m != 1 {
		t.Fatalf("after the final turn the second body is held %d times and the final one %d (their requests' only)", n, m)
	}
	for _, b := range []*bodyBuf{second, final} {
		b.release()
		if n := b.refs.Load(); n != 0 {
			t.Fatalf("held %d times after every release", n)
		}
	}
}

// A body is read into a buffer of its size class, at most four times its
// size; small and huge bodies are not pooled.
func TestBodyBufferClasses(t *testing.T) {
	for _, c := range []struct{ size, class int }{
		{0, -1}, {1 << 10, -1}, {32<<10 - 1, -1}, {32 << 10, 0}, {64 << 10, 0}, {64<<10 + 1, 1},
		{400 << 10, 3}, {1 << 20, 4}, {1<<20 + 1, -1},
	} {
		if k := bodyClass(c.size); k != c.class {
			t.Errorf("a body of %d bytes: class %d, want %d", c.size, k, c.class)
		}
		b := newBodyBuf(c.size)
		if c.class >= 0 && (cap(b.b) < c.size || cap(b.b) > 4*c.size) {
			t.Errorf("a body of %d bytes gets a buffer of %d", c.size, cap(b.b))
		}
		b.release()
	}
}
