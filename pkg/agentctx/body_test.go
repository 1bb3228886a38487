package agentctx

import "testing"

func TestWithBodyFallback(t *testing.T) {
	hdr := AgentContext{SessionID: "h", Harness: HarnessOpenCode}
	for _, tc := range []struct {
		ac        AgentContext
		key, user string
		want      string
		harness   Harness
	}{
		{ac: hdr, key: "k", want: "h", harness: HarnessOpenCode},
		{key: " k1 ", want: "k1", harness: HarnessBody},
		{user: `{"device_id":"d","account_uuid":"","session_id":"923f400d"}`, want: "923f400d", harness: HarnessBody},
		{user: `user_abc_account_42_session_5e1f-aa`, want: "5e1f-aa", harness: HarnessBody},
		{key: "k2", user: `{"session_id":"s"}`, want: "k2", harness: HarnessBody},
		{user: `{"session_id":"bad id"}`},
		{user: `{not json`},
		{user: `plain-user`},
	} {
		got := WithBodyFallback(tc.ac, tc.key, tc.user)
		if got.SessionID != tc.want || got.Harness != tc.harness {
			t.Errorf("%+v %q %q: got %+v", tc.ac, tc.key, tc.user, got)
		}
	}
}
