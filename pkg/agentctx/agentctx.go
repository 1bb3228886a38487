package agentctx

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Canonical and harness-native header names (lower case; HTTP header lookup is
// case-insensitive).
const (
	HeaderSessionID       = "x-dynamo-session-id"
	HeaderParentSessionID = "x-dynamo-parent-session-id"
	HeaderSessionFinal    = "x-dynamo-session-final"

	HeaderClaudeSession     = "x-claude-code-session-id"
	HeaderClaudeAgent       = "x-claude-code-agent-id"
	HeaderClaudeParentAgent = "x-claude-code-parent-agent-id"

	HeaderCodexThread       = "thread-id"
	HeaderCodexSession      = "session-id"
	HeaderCodexParentThread = "x-codex-parent-thread-id"
	HeaderCodexTurnMetadata = "x-codex-turn-metadata"

	HeaderDeepSeekSession = "x-deepseek-harness-session-id"
	HeaderDeepSeekParent  = "x-deepseek-harness-parent-session-id"
	HeaderDeepSeekCompact = "x-deepseek-harness-compact"

	HeaderOpenCodeSession = "x-session-id"
	HeaderOpenCodeParent  = "x-parent-session-id"
)

// MaxIDBytes bounds a session id: ids are untrusted and end up as map keys,
// trace fields and gRPC fields.
const MaxIDBytes = 256

// Harness names the source an identity was read from.
type Harness string

const (
	HarnessNone       Harness = ""            // no identity header at all
	HarnessCanonical  Harness = "dynamo"      // x-dynamo-* headers
	HarnessClaudeCode Harness = "claude-code" // x-claude-code-*
	HarnessCodex      Harness = "codex"       // thread-id / session-id
	HarnessDeepSeek   Harness = "deepseek"    // x-deepseek-harness-*
	HarnessOpenCode   Harness = "opencode"    // x-session-id
)

// InputTrigger says what made the client send this request: a person typing,
// a tool finishing, or something else (see Trigger* helpers).
type InputTrigger string

const (
	TriggerUnknown     InputTrigger = ""
	TriggerUserMessage InputTrigger = "user_message"
	TriggerToolResult  InputTrigger = "tool_result"
	TriggerOther       InputTrigger = "other"
)

// Compaction describes a request that asks the model to summarise (compact)
// its own history. Empty fields are unknown.
type Compaction struct {
	Trigger        string
	Reason         string
	Implementation string
	Phase          string
	Strategy       string
}

// AgentContext is the identity of one request. A zero SessionID means the
// request carried no session identity.
type AgentContext struct {
	SessionID       string
	ParentSessionID string // "" when none; never equal to SessionID
	SessionFinal    *bool  // nil when the client did not say
	Compaction      *Compaction
	InputTrigger    InputTrigger
	Harness         Harness
}

// HasSession reports whether the request carried a session id.
func (a AgentContext) HasSession() bool { return a.SessionID != "" }

// Final reports whether the client marked this as the session's last request.
func (a AgentContext) Final() bool { return a.SessionFinal != nil && *a.SessionFinal }

// Headers is what FromHeaders reads; net/http.Header satisfies it.
type Headers interface {
	Get(key string) string
}

// Error is an invalid identity header. The HTTP layer maps it to a 400.
type Error struct {
	Header string // the offending header, lower case
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid %s header: %s", e.Header, e.Reason)
}

// harness is one row of the agent-native mapping table.
type harness struct {
	name   Harness
	roots  []string // root session headers, first present wins
	child  string   // child-agent header ("" if none)
	parent string   // explicit parent header
	// inferParent: a child without an explicit parent has the root session
	// as parent (Claude Code's sub-agents).
	inferParent bool
}

// harnesses is the mapping table in precedence order; the first harness whose
// root header is present wins.
var harnesses = []harness{
	{name: HarnessClaudeCode, roots: []string{HeaderClaudeSession}, child: HeaderClaudeAgent, parent: HeaderClaudeParentAgent, inferParent: true},
	{name: HarnessCodex, roots: []string{HeaderCodexThread, HeaderCodexSession}, parent: HeaderCodexParentThread},
	{name: HarnessDeepSeek, roots: []string{HeaderDeepSeekSession}, parent: HeaderDeepSeekParent},
	{name: HarnessOpenCode, roots: []string{HeaderOpenCodeSession}, parent: HeaderOpenCodeParent},
}

// FromHeaders reads the agent identity of a request. InputTrigger is left
// unknown: it depends on the body (see the Trigger* helpers).
func FromHeaders(h Headers) (AgentContext, error) {
	var ac AgentContext
	final, err := readBool(h, HeaderSessionFinal)
	if err != nil {
		return AgentContext{}, err
	}
	ac.SessionFinal = final

	if sid, err := readID(h, HeaderSessionID); err != nil {
		return AgentContext{}, err
	} else if sid != "" {
		parent, err := readID(h, HeaderParentSessionID)
		if err != nil {
			return AgentContext{}, err
		}
		ac.SessionID, ac.Harness = sid, HarnessCanonical
		if parent != sid {
			ac.ParentSessionID = parent
		}
		// Codex compaction metadata is still honoured under canonical ids.
		if present(h, HeaderCodexThread) {
			ac.Compaction = codexCompaction(h.Get(HeaderCodexTurnMetadata))
		}
		return ac, nil
	}

	for _, hs := range harnesses {
		root, rootHeader := "", ""
		for _, name := range hs.roots {
			if present(h, name) {
				rootHeader = name
				break
			}
		}
		if rootHeader == "" {
			continue
		}
		if root, err = readID(h, rootHeader); err != nil {
			return AgentContext{}, err
		}
		sid := root
		if hs.child != "" {
			child, err := readID(h, hs.child)
			if err != nil {
				return AgentContext{}, err
			}
			if child != "" {
				sid = child
			}
		}
		parent, err := readID(h, hs.parent)
		if err != nil {
			return AgentContext{}, err
		}
		isChild := sid != root
		if parent == sid || (hs.inferParent && !isChild) {
			parent = ""
		}
		if parent == "" && hs.inferParent && isChild {
			parent = root
		}
		ac.SessionID, ac.ParentSessionID, ac.Harness = sid, parent, hs.name
		switch hs.name {
		case HarnessCodex:
			ac.Compaction = codexCompaction(h.Get(HeaderCodexTurnMetadata))
		case HarnessDeepSeek:
			if strings.TrimSpace(h.Get(HeaderDeepSeekCompact)) == "1" {
				ac.Compaction = &Compaction{Implementation: "deepseek-harness"}
			}
		}
		return ac, nil
	}
	return ac, nil
}

// present reports whether a header has a non-blank value.
func present(h Headers, name string) bool {
	return strings.TrimSpace(h.Get(name)) != ""
}

// readID returns the trimmed value of an id header, "" when absent or blank.
func readID(h Headers, name string) (string, error) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return "", nil
	}
	if err := ValidateID(v); err != nil {
		return "", &Error{Header: name, Reason: err.Error()}
	}
	return v, nil
}

// ValidateID checks an already-trimmed id: 1..MaxIDBytes of visible ASCII
// (0x21–0x7E). Anything else (control characters, spaces, non-ASCII) could
// forge log lines, collide after normalisation or blow up memory.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("empty")
	}
	if len(id) > MaxIDBytes {
		return fmt.Errorf("longer than %d bytes", MaxIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("byte %d (0x%02x) is not visible ASCII", i, c)
		}
	}
	return nil
}

// readBool parses an optional boolean header the way Dynamo's config does.
func readBool(h Headers, name string) (*bool, error) {
	v := strings.ToLower(strings.TrimSpace(h.Get(name)))
	var b bool
	switch v {
	case "":
		return nil, nil
	case "true", "1", "yes", "on":
		b = true
	case "false", "0", "no", "off":
		b = false
	default:
		return nil, &Error{Header: name, Reason: "not a boolean (true/false, 1/0, yes/no, on/off)"}
	}
	return &b, nil
}

// codexCompaction reads Codex's turn metadata; only request_kind ==
// "compaction" marks a compaction. Malformed metadata is ignored: it is
// advisory and must never fail a request.
func codexCompaction(raw string) *Compaction {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil
	}
	var md map[string]any
	if err := json.Unmarshal([]byte(raw), &md); err != nil {
		return nil
	}
	if kind, _ := md["request_kind"].(string); kind != "compaction" {
		return nil
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := md[k].(string); ok && s != "" {
				return s
			}
		}
		return ""
	}
	c := &Compaction{
		Trigger:        str("compaction_trigger", "turn_trigger", "trigger"),
		Reason:         str("compaction_reason", "reason"),
		Implementation: str("compaction_implementation", "implementation"),
		Phase:          str("compaction_phase", "phase"),
		Strategy:       str("compaction_strategy", "strategy"),
	}
	if c.Implementation == "" {
		c.Implementation = "codex"
	}
	return c
}

// Scope qualifies a client-supplied id by tenant so that sessions of
// different tenants can never collide: one tenant cannot steer or observe
// another's session by guessing its id. It is a session's name wherever the
// mesh names sessions beyond the frontend and scheduler, which key them by
// tenant and id: to engines (their session header, and the KV events a
// turn causes), in KV hints and in the session-prefix indexer. Tenant names
// never contain ':' (the frontend's tenant table enforces it), so the first
// ':' splits the two back. Without a tenant (a replayed workload's sessions,
// which have none) it is the id itself.
func Scope(tenant, id string) string {
	if id == "" || tenant == "" {
		return id
	}
	return tenant + ":" + id
}

// Unscope splits a scoped id back into tenant and client id.
func Unscope(scoped string) (tenant, id string) {
	if i := strings.IndexByte(scoped, ':'); i >= 0 {
		return scoped[:i], scoped[i+1:]
	}
	return "", scoped
}
