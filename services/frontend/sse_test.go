package frontend

import "testing"

func TestMarshalTypeFirst(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"type": "ping"}, `{"type":"ping"}`},
		{map[string]any{"type": "x", "index": 1, "a": "b"}, `{"type":"x","a":"b","index":1}`},
		{map[string]any{"index": 1}, `{"index":1}`},
	} {
		b, err := marshalTypeFirst(tc.in)
		if err != nil || string(b) != tc.want {
			t.Errorf("%v: %s %v", tc.in, b, err)
		}
		if _, ok := tc.in["index"]; ok && tc.in["type"] == nil && len(tc.in) != 1 {
			t.Error("input modified")
		}
	}
}
