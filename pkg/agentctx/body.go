package agentctx

import (
	"encoding/json"
	"strings"
)

// HarnessBody marks an identity read from the request body because no
// identity header was present.
const HarnessBody Harness = "body"

// WithBodyFallback fills a missing session from what the body carries, for
// clients that send no identity header (older Claude Code versions, OpenAI
// clients that only set prompt_cache_key). Headers always win: an
// AgentContext that already has a session is returned unchanged. Invalid
// body values are ignored rather than rejected: the body field was never
// meant as an identity and must not fail a request.
func WithBodyFallback(ac AgentContext, promptCacheKey, anthropicUserID string) AgentContext {
	if ac.HasSession() {
		return ac
	}
	id := strings.TrimSpace(promptCacheKey)
	if id == "" {
		id = claudeSessionFromUserID(anthropicUserID)
	}
	if id == "" || ValidateID(id) != nil {
		return ac
	}
	ac.SessionID, ac.ParentSessionID, ac.Harness = id, "", HarnessBody
	return ac
}

// claudeSessionFromUserID reads Claude Code's metadata.user_id: newer
// versions send a JSON object string with session_id, older ones
// "user_<hash>_account_<id>_session_<uuid>".
func claudeSessionFromUserID(userID string) string {
	userID = strings.TrimSpace(userID)
	if strings.HasPrefix(userID, "{") {
		var v struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal([]byte(userID), &v) == nil {
			return strings.TrimSpace(v.SessionID)
		}
		return ""
	}
	if i := strings.LastIndex(userID, "_session_"); i >= 0 {
		return userID[i+len("_session_"):]
	}
	return ""
}
