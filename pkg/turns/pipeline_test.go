package turns

import (
	"math"
	"testing"

	"switchyard.dev/pkg/admission"
)

func TestSessionKeyRoundTrip(t *testing.T) {
	for _, k := range [][2]string{{"t", "s"}, {"", "s"}, {"a/b", "c\x01d"}} {
		got := SplitSessionKey(SessionKey(admissionKey(k[0], k[1])))
		if got.Tenant != k[0] || got.SessionID != k[1] {
			t.Fatalf("%q → %+v", k, got)
		}
	}
	if SessionKey(admissionKey("t", "")) != "" {
		t.Fatal("no session must stay empty")
	}
}

func TestEnginePriority(t *testing.T) {
	for _, c := range []struct {
		jump float64
		want int32
	}{
		{0, 0}, {1, -1}, {-2, 2}, {-1, 1}, {0.4, 0}, {0.6, -1}, {-2.5, 3},
		{math.Inf(1), -1 << 20}, {math.Inf(-1), 1 << 20}, {math.NaN(), 0}, {1e12, -1 << 20},
	} {
		if got := EnginePriority(c.jump); got != c.want {
			t.Errorf("EnginePriority(%v) = %d, want %d", c.jump, got, c.want)
		}
	}
}

func admissionKey(tenant, session string) admission.Key {
	return admission.Key{Tenant: tenant, SessionID: session}
}
