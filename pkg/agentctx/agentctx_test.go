package agentctx

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func ptr(b bool) *bool { return &b }

func TestFromHeaders(t *testing.T) {
	long := strings.Repeat("a", MaxIDBytes)
	tests := []struct {
		name    string
		h       http.Header
		want    AgentContext
		wantErr string // header named in the *Error, "" for success
	}{
		{name: "none", h: hdr(), want: AgentContext{}},
		{name: "canonical", h: hdr("X-Dynamo-Session-Id", "s1", "X-Dynamo-Parent-Session-Id", "p1", "X-Dynamo-Session-Final", "true"),
			want: AgentContext{SessionID: "s1", ParentSessionID: "p1", SessionFinal: ptr(true), Harness: HarnessCanonical}},
		{name: "canonical trims", h: hdr("x-dynamo-session-id", "  s1\t"),
			want: AgentContext{SessionID: "s1", Harness: HarnessCanonical}},
		{name: "canonical parent equal to session dropped", h: hdr("x-dynamo-session-id", "s1", "x-dynamo-parent-session-id", "s1"),
			want: AgentContext{SessionID: "s1", Harness: HarnessCanonical}},
		{name: "canonical wins over claude", h: hdr("x-dynamo-session-id", "s1", "x-claude-code-session-id", "c1", "x-claude-code-agent-id", "a1"),
			want: AgentContext{SessionID: "s1", Harness: HarnessCanonical}},
		{name: "blank canonical falls through", h: hdr("x-dynamo-session-id", "   ", "x-session-id", "o1"),
			want: AgentContext{SessionID: "o1", Harness: HarnessOpenCode}},
		{name: "canonical parent alone is ignored", h: hdr("x-dynamo-parent-session-id", "p", "x-session-id", "o1"),
			want: AgentContext{SessionID: "o1", Harness: HarnessOpenCode}},
		{name: "final applies to harness ids", h: hdr("x-dynamo-session-final", "no", "x-session-id", "o1"),
			want: AgentContext{SessionID: "o1", SessionFinal: ptr(false), Harness: HarnessOpenCode}},
		{name: "final without any session", h: hdr("x-dynamo-session-final", "1"),
			want: AgentContext{SessionFinal: ptr(true)}},
		{name: "claude root", h: hdr("X-Claude-Code-Session-Id", "root"),
			want: AgentContext{SessionID: "root", Harness: HarnessClaudeCode}},
		{name: "claude root ignores parent header", h: hdr("X-Claude-Code-Session-Id", "root", "X-Claude-Code-Parent-Agent-Id", "x"),
			want: AgentContext{SessionID: "root", Harness: HarnessClaudeCode}},
		{name: "claude child infers root parent", h: hdr("X-Claude-Code-Session-Id", "root", "X-Claude-Code-Agent-Id", "kid"),
			want: AgentContext{SessionID: "kid", ParentSessionID: "root", Harness: HarnessClaudeCode}},
		{name: "claude nested child explicit parent", h: hdr("X-Claude-Code-Session-Id", "root", "X-Claude-Code-Agent-Id", "kid", "X-Claude-Code-Parent-Agent-Id", "mid"),
			want: AgentContext{SessionID: "kid", ParentSessionID: "mid", Harness: HarnessClaudeCode}},
		{name: "claude child parent equal to self falls back to root", h: hdr("X-Claude-Code-Session-Id", "root", "X-Claude-Code-Agent-Id", "kid", "X-Claude-Code-Parent-Agent-Id", "kid"),
			want: AgentContext{SessionID: "kid", ParentSessionID: "root", Harness: HarnessClaudeCode}},
		{name: "claude agent equal to root is a root turn", h: hdr("X-Claude-Code-Session-Id", "root", "X-Claude-Code-Agent-Id", "root"),
			want: AgentContext{SessionID: "root", Harness: HarnessClaudeCode}},
		{name: "claude agent without root is not claude", h: hdr("X-Claude-Code-Agent-Id", "kid", "x-session-id", "o1"),
			want: AgentContext{SessionID: "o1", Harness: HarnessOpenCode}},
		{name: "claude wins over opencode, no mixing", h: hdr("X-Claude-Code-Session-Id", "root", "x-session-id", "o1", "x-parent-session-id", "op"),
			want: AgentContext{SessionID: "root", Harness: HarnessClaudeCode}},
		{name: "codex thread", h: hdr("thread-id", "t1", "session-id", "s-old"),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex}},
		{name: "codex session-id fallback", h: hdr("session-id", "s1"),
			want: AgentContext{SessionID: "s1", Harness: HarnessCodex}},
		{name: "codex parent", h: hdr("thread-id", "t1", "x-codex-parent-thread-id", "t0"),
			want: AgentContext{SessionID: "t1", ParentSessionID: "t0", Harness: HarnessCodex}},
		{name: "codex parent equal dropped", h: hdr("thread-id", "t1", "x-codex-parent-thread-id", "t1"),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex}},
		{name: "codex compaction", h: hdr("thread-id", "t1", "x-codex-turn-metadata", `{"request_kind":"compaction","turn_trigger":"auto"}`),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex, Compaction: &Compaction{Trigger: "auto", Implementation: "codex"}}},
		{name: "codex turn is not compaction", h: hdr("thread-id", "t1", "x-codex-turn-metadata", `{"request_kind":"turn"}`),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex}},
		{name: "codex malformed metadata ignored", h: hdr("thread-id", "t1", "x-codex-turn-metadata", `{not json`),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex}},
		{name: "canonical keeps codex compaction", h: hdr("x-dynamo-session-id", "s1", "thread-id", "t1", "x-codex-turn-metadata", `{"request_kind":"compaction"}`),
			want: AgentContext{SessionID: "s1", Harness: HarnessCanonical, Compaction: &Compaction{Implementation: "codex"}}},
		{name: "canonical without thread-id ignores codex metadata", h: hdr("x-dynamo-session-id", "s1", "x-codex-turn-metadata", `{"request_kind":"compaction"}`),
			want: AgentContext{SessionID: "s1", Harness: HarnessCanonical}},
		{name: "codex wins over opencode", h: hdr("thread-id", "t1", "x-session-id", "o1"),
			want: AgentContext{SessionID: "t1", Harness: HarnessCodex}},
		{name: "deepseek", h: hdr("x-deepseek-harness-session-id", "d1", "x-deepseek-harness-parent-session-id", "d0", "x-deepseek-harness-compact", "1"),
			want: AgentContext{SessionID: "d1", ParentSessionID: "d0", Harness: HarnessDeepSeek, Compaction: &Compaction{Implementation: "deepseek-harness"}}},
		{name: "deepseek wins over opencode", h: hdr("x-deepseek-harness-session-id", "d1", "x-session-id", "o1"),
			want: AgentContext{SessionID: "d1", Harness: HarnessDeepSeek}},
		{name: "opencode child", h: hdr("x-session-id", "ses_kid", "x-parent-session-id", "ses_root", "x-session-affinity", "ses_kid"),
			want: AgentContext{SessionID: "ses_kid", ParentSessionID: "ses_root", Harness: HarnessOpenCode}},
		{name: "opencode affinity alone is not identity", h: hdr("x-session-affinity", "ses_x"), want: AgentContext{}},
		{name: "max length ok", h: hdr("x-dynamo-session-id", long),
			want: AgentContext{SessionID: long, Harness: HarnessCanonical}},
		{name: "too long", h: hdr("x-dynamo-session-id", long+"a"), wantErr: HeaderSessionID},
		{name: "control char", h: hdr("x-session-id", "a\x01b"), wantErr: HeaderOpenCodeSession},
		{name: "interior space", h: hdr("thread-id", "a b"), wantErr: HeaderCodexThread},
		{name: "non-ascii", h: hdr("x-claude-code-session-id", "sé"), wantErr: HeaderClaudeSession},
		{name: "bad parent", h: hdr("x-dynamo-session-id", "s", "x-dynamo-parent-session-id", "p\x7f"), wantErr: HeaderParentSessionID},
		{name: "bad claude child", h: hdr("x-claude-code-session-id", "r", "x-claude-code-agent-id", "k\x00"), wantErr: HeaderClaudeAgent},
		{name: "bad final", h: hdr("x-dynamo-session-final", "maybe"), wantErr: HeaderSessionFinal},
		{name: "bad header of a losing harness is ignored", h: hdr("x-claude-code-session-id", "r", "x-session-id", "bad id"),
			want: AgentContext{SessionID: "r", Harness: HarnessClaudeCode}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromHeaders(tt.h)
			if tt.wantErr != "" {
				var ae *Error
				if !errors.As(err, &ae) {
					t.Fatalf("err = %v, want *Error", err)
				}
				if ae.Header != tt.wantErr {
					t.Fatalf("error header = %q, want %q", ae.Header, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
}

func TestTriggers(t *testing.T) {
	for role, want := range map[string]InputTrigger{
		"user": TriggerUserMessage, "tool": TriggerToolResult, "function": TriggerToolResult,
		"assistant": TriggerOther, "system": TriggerOther, "": TriggerOther,
	} {
		if got := TriggerForChat(role); got != want {
			t.Errorf("chat %q = %q, want %q", role, got, want)
		}
	}
	rt := []struct {
		text  bool
		items []ResponsesItem
		want  InputTrigger
	}{
		{text: true, want: TriggerUserMessage},
		{want: TriggerOther},
		{items: []ResponsesItem{{Type: "message", Role: "user"}}, want: TriggerUserMessage},
		{items: []ResponsesItem{{Role: "user"}}, want: TriggerUserMessage},
		{items: []ResponsesItem{{Type: "message", Role: "user"}, {Type: "function_call"}, {Type: "function_call_output"}}, want: TriggerToolResult},
		{items: []ResponsesItem{{Type: "custom_tool_call_output"}}, want: TriggerToolResult},
		{items: []ResponsesItem{{Type: "message", Role: "developer"}}, want: TriggerOther},
		{items: []ResponsesItem{{Type: "reasoning"}}, want: TriggerOther},
	}
	for i, tt := range rt {
		if got := TriggerForResponses(tt.text, tt.items); got != tt.want {
			t.Errorf("responses #%d = %q, want %q", i, got, tt.want)
		}
	}
	at := []struct {
		msgs []AnthropicMessage
		want InputTrigger
	}{
		{want: TriggerUserMessage},
		{msgs: []AnthropicMessage{{Role: "user"}}, want: TriggerUserMessage},
		{msgs: []AnthropicMessage{{Role: "user"}, {Role: "assistant"}, {Role: "user", HasToolResult: true}}, want: TriggerToolResult},
		{msgs: []AnthropicMessage{{Role: "user", HasToolResult: true}, {Role: "assistant"}}, want: TriggerToolResult},
		{msgs: []AnthropicMessage{{Role: "user", HasToolResult: true}, {Role: "user"}}, want: TriggerUserMessage},
	}
	for i, tt := range at {
		if got := TriggerForAnthropic(tt.msgs); got != tt.want {
			t.Errorf("anthropic #%d = %q, want %q", i, got, tt.want)
		}
	}
	if TriggerForCompletions() != TriggerOther {
		t.Error("completions must be other")
	}
}

func TestScope(t *testing.T) {
	s := Scope("acme", "ses:1")
	if s != "acme:ses:1" {
		t.Fatalf("Scope = %q", s)
	}
	if tn, id := Unscope(s); tn != "acme" || id != "ses:1" {
		t.Fatalf("Unscope = %q %q", tn, id)
	}
	if Scope("a", "x") == Scope("b", "x") {
		t.Fatal("tenants collide")
	}
	if Scope("a", "") != "" {
		t.Fatal("no session must stay no session")
	}
}

// fixtureDir holds requests captured from real agent CLIs (see its README).
const fixtureDir = "testdata/agents"

type fixtureLine struct {
	Scenario string      `json:"scenario"`
	Marker   string      `json:"marker"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	Headers  [][2]string `json:"headers"`
}

// TestFixtureHeaders replays the identity headers of every captured request
// and checks the identity each harness's table row implies.
func TestFixtureHeaders(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no fixtures at " + fixtureDir)
	}
	n := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var l fixtureLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if l.Marker != "" || l.Method != "POST" {
				continue
			}
			h := http.Header{}
			for _, kv := range l.Headers {
				h.Add(kv[0], kv[1])
			}
			got, err := FromHeaders(h)
			if err != nil {
				t.Fatalf("%s %s: %v", l.Scenario, l.Path, err)
			}
			var want AgentContext
			switch {
			case strings.HasPrefix(l.Scenario, "claude"):
				want = AgentContext{SessionID: h.Get("X-Claude-Code-Session-Id"), Harness: HarnessClaudeCode}
			case strings.HasPrefix(l.Scenario, "codex"):
				want = AgentContext{SessionID: h.Get("thread-id"), Harness: HarnessCodex}
			case strings.HasPrefix(l.Scenario, "opencode"):
				want = AgentContext{SessionID: h.Get("x-session-id"), Harness: HarnessOpenCode}
			default:
				t.Fatalf("unknown scenario %q", l.Scenario)
			}
			if want.SessionID == "" {
				t.Fatalf("%s: fixture lacks its harness's session header", l.Scenario)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s %s (-want +got)\n%s", l.Scenario, l.Path, d)
			}
			n++
		}
		fh.Close()
	}
	if n == 0 {
		t.Fatal("no requests replayed")
	}
}

func FuzzFromHeaders(f *testing.F) {
	f.Add("s1", "p1", "true", "root", "kid", "", "t1", `{"request_kind":"compaction"}`, "o1")
	f.Add("", "", "", "root", "kid", "mid", "", "", "")
	f.Add("", "", "", "", "", "", "t", `{"request_kind":1}`, "o")
	f.Fuzz(func(t *testing.T, sid, parent, final, claude, agent, claudeParent, thread, meta, opencode string) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h[http.CanonicalHeaderKey(k)] = []string{v}
			}
		}
		set(HeaderSessionID, sid)
		set(HeaderParentSessionID, parent)
		set(HeaderSessionFinal, final)
		set(HeaderClaudeSession, claude)
		set(HeaderClaudeAgent, agent)
		set(HeaderClaudeParentAgent, claudeParent)
		set(HeaderCodexThread, thread)
		set(HeaderCodexTurnMetadata, meta)
		set(HeaderOpenCodeSession, opencode)
		ac, err := FromHeaders(h)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if ac.SessionID == "" {
			if ac.ParentSessionID != "" || ac.Harness != HarnessNone {
				t.Fatalf("parent or harness without session: %+v", ac)
			}
			return
		}
		if err := ValidateID(ac.SessionID); err != nil {
			t.Fatalf("invalid session id accepted: %v", err)
		}
		if ac.ParentSessionID != "" {
			if err := ValidateID(ac.ParentSessionID); err != nil {
				t.Fatalf("invalid parent accepted: %v", err)
			}
			if ac.ParentSessionID == ac.SessionID {
				t.Fatalf("parent equals session: %+v", ac)
			}
		}
	})
}
