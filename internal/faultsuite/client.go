package faultsuite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Turn is one chat completion as the client saw it.
type Turn struct {
	Kind    string // which load sent it: "session", "probe", "burst", "drain", ...
	Session string
	Start   time.Time // first attempt sent
	Head    time.Time // response headers: for the frontend, its first token (zero: never)
	End     time.Time // zero while in flight
	Status  int       // HTTP status (0: no response)
	Worker  string    // X-Switchyard-Worker
	// Frontend is the base URL of the frontend that answered (the last
	// tried while none has).
	Frontend string
	Done     bool // the stream ended with [DONE] and no error event
	Err      string
	// Refused counts the attempts the frontend refused before reading them
	// (connection refused or reset before any response, or an idle
	// keep-alive connection it had closed): nothing was read, so the client
	// sent it again, as HTTP clients do.
	Refused int
	Content string
	Chunks  int
	// Stall is the longest wait the client had for its next byte: from the
	// start to the first, or between two events of the stream.
	Stall time.Duration
	last  time.Time // the last byte so far
}

// OK: a complete answer.
func (t *Turn) OK() bool { return t.Status == http.StatusOK && t.Done }

// Lost: failed before its first byte — the mesh should have migrated or
// retried it.
func (t *Turn) Lost() bool { return !t.End.IsZero() && !t.OK() && t.Head.IsZero() }

// Broken: failed after streaming began.
func (t *Turn) Broken() bool { return !t.End.IsZero() && !t.OK() && !t.Head.IsZero() }

// Recorder keeps every turn; the client updates them under its lock.
type Recorder struct {
	mu    sync.Mutex
	turns []*Turn
}

func (r *Recorder) add(t *Turn) {
	r.mu.Lock()
	r.turns = append(r.turns, t)
	r.mu.Unlock()
}

func (r *Recorder) update(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

// Turns returns copies of the turns for which keep is true.
func (r *Recorder) Turns(keep func(*Turn) bool) []Turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Turn
	for _, t := range r.turns {
		if keep == nil || keep(t) {
			out = append(out, *t)
		}
	}
	return out
}

// Overlapping keeps the turns in flight at some point of [from, to].
func Overlapping(from, to time.Time) func(*Turn) bool {
	return func(t *Turn) bool {
		return !t.Start.After(to) && (t.End.IsZero() || !t.End.Before(from))
	}
}

// Message is a chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Client sends streaming chat completions to the frontends, as a load
// balancer in front of them would: each turn to the next frontend in turn,
// and a turn whose connection is refused (a dead frontend) to the next.
type Client struct {
	Bases []string
	next  atomic.Uint64
	Model string
	HTTP  *http.Client
	Rec   *Recorder
	// Timeout bounds one turn, retries included.
	Timeout time.Duration
	// RefusedRetry bounds how long a refused turn keeps being sent again.
	RefusedRetry time.Duration
}

// NewClient is a client of the frontend at base with keep-alive
// connections enough for conc concurrent streams.
func NewClient(bases []string, conc int) *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        conc * 2,
		MaxIdleConnsPerHost: conc * 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{Bases: bases, Model: "switchyard-sim", HTTP: &http.Client{Transport: tr}, Rec: &Recorder{},
		Timeout: 30 * time.Second, RefusedRetry: 15 * time.Second}
}

// Close drops idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// Chat sends one turn of session (streaming) and reads it to the end.
func (c *Client) Chat(ctx context.Context, kind, session string, msgs []Message, maxTokens int) *Turn {
	t := &Turn{Kind: kind, Session: session, Start: time.Now()}
	c.Rec.add(t)
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{
		"model": c.Model, "messages": msgs, "max_tokens": maxTokens, "stream": true,
	})
	at := c.next.Add(1)
	for {
		err := c.attempt(ctx, t, c.Bases[at%uint64(len(c.Bases))], session, body)
		if err != nil && refused(err) && t.Head.IsZero() && time.Since(t.Start) < c.RefusedRetry && ctx.Err() == nil {
			at++ // the next frontend
			c.Rec.update(func() { t.Refused++ })
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		c.Rec.update(func() {
			if err != nil {
				t.Err = err.Error()
			}
			t.End = time.Now()
			if t.last.IsZero() {
				t.last = t.Start
			}
			t.Stall = max(t.Stall, t.End.Sub(t.last))
		})
		return t
	}
}

// refused: the request never reached the frontend's handler. Besides a
// refused connection and an idle one the server had closed, that is a reset
// before any response byte (callers check no headers arrived): no fault
// kills the frontend, and its drain lets every request it accepted finish
// (the SIGTERM fault asserts it), so such a reset is a connection still in
// the listen backlog when the listener closed, which the kernel resets. An
// HTTP client sends it again, as the SDKs do on connection errors.
//
// A frontend killed with the request read but no response sent yet (the
// replica faults kill one) ends the connection without a response: that
// too is sent again, to the next frontend, as a load balancer does with a
// backend that died before answering. So is one killed while the client
// was still writing the request: the kernel resets the connection and the
// client's next write fails with a broken pipe (rare: one of about 2,500
// failed requests around 30 kills of a loaded server; a body larger than
// one write).
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

func (c *Client) attempt(ctx context.Context, t *Turn, base, session string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-dynamo-session-id", session)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.Rec.update(func() {
		t.Status = resp.StatusCode
		t.Frontend = base
		t.Worker = resp.Header.Get("X-Switchyard-Worker")
		if resp.StatusCode == http.StatusOK {
			t.Head = time.Now()
			t.last = t.Head
			t.Stall = max(t.Stall, t.Head.Sub(t.Start))
		}
	})
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var content strings.Builder
	chunks := 0
	defer func() {
		c.Rec.update(func() { t.Content, t.Chunks = content.String(), chunks })
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		c.Rec.update(func() {
			now := time.Now()
			t.Stall = max(t.Stall, now.Sub(t.last))
			t.last = now
		})
		if string(data) == "[DONE]" {
			c.Rec.update(func() { t.Done = true })
			return nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return fmt.Errorf("bad event %q: %w", data, err)
		}
		if chunk.Error != nil {
			return fmt.Errorf("in-band error (%s): %s", chunk.Error.Type, chunk.Error.Message)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != nil && *chunk.Choices[0].Delta.Content != "" {
			content.WriteString(*chunk.Choices[0].Delta.Content)
			chunks++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	return errors.New("stream ended without [DONE]")
}

// Session is one agent conversation: every turn resends the growing
// conversation with a new user message, as a harness does.
type Session struct {
	ID        string
	Kind      string
	MaxTokens int
	// TurnsPerConversation restarts the conversation after this many turns
	// (same session id), so prompts stay bounded in a long run.
	TurnsPerConversation int
	// Think is the pause between turns (a tool call), jittered ±50%.
	Think time.Duration
	// SystemRepeat is how many times the system prompt states the agent's
	// instructions (8 when 0; each time is about 16 tokens).
	SystemRepeat int

	msgs []Message
	n    int
}

// Run sends turns until stop is closed (the turn in flight then finishes)
// or ctx ends (it is cancelled).
func (s *Session) Run(ctx context.Context, c *Client, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		s.Turn(ctx, c)
		if s.Think > 0 {
			d := time.Duration(float64(s.Think) * (0.5 + rand.Float64()))
			select {
			case <-stop:
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// Turn sends the next turn. A failed turn is sent again as the next one
// (same conversation), as a harness retries.
func (s *Session) Turn(ctx context.Context, c *Client) *Turn {
	if s.TurnsPerConversation > 0 && s.n >= s.TurnsPerConversation {
		s.msgs, s.n = nil, 0
	}
	if len(s.msgs) == 0 {
		repeat := s.SystemRepeat
		if repeat <= 0 {
			repeat = 8
		}
		s.msgs = []Message{
			{Role: "system", Content: "You are a coding agent in session " + s.ID + ". " + strings.Repeat("Read the repository, plan the change, edit the files, run the tests. ", repeat)},
		}
	}
	if n := len(s.msgs); s.msgs[n-1].Role != "user" {
		s.msgs = append(s.msgs, Message{Role: "user", Content: fmt.Sprintf("Step %d of session %s: the tool returned %d lines of output; continue.", s.n+1, s.ID, 10+s.n)})
	}
	t := c.Chat(ctx, s.Kind, s.ID, s.msgs, s.MaxTokens)
	c.Rec.update(func() {
		if t.OK() {
			s.msgs = append(s.msgs, Message{Role: "assistant", Content: t.Content})
			s.n++
		}
	})
	return t
}
