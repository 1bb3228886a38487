package frontend

import (
	"encoding/json"
	"net/http"
)

// sseWriter writes server-sent events and flushes each one: agent harnesses
// render tokens as they arrive.
type sseWriter struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter, workerID string) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	h.Set(workerHeader, workerID)
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w}
}

// data writes "data: <json>\n\n".
func (s *sseWriter) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw("", b)
}

// event writes "event: <name>\ndata: <json>\n\n". Map payloads are
// written with "type" first, as the upstream APIs do (clients that sniff
// the type before parsing the rest exist).
func (s *sseWriter) event(name string, v any) error {
	var b []byte
	var err error
	if m, ok := v.(map[string]any); ok {
		b, err = marshalTypeFirst(m)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	return s.raw(name, b)
}

// marshalTypeFirst marshals m with its "type" key first, then the others in
// sorted order (encoding/json's order for maps).
func marshalTypeFirst(m map[string]any) ([]byte, error) {
	t, ok := m["type"]
	if !ok {
		return json.Marshal(m)
	}
	delete(m, "type")
	rest, err := json.Marshal(m)
	m["type"] = t
	if err != nil {
		return nil, err
	}
	tb, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(rest)+len(tb)+10)
	out = append(out, `{"type":`...)
	out = append(out, tb...)
	if len(rest) > 2 {
		out = append(out, ',')
		out = append(out, rest[1:]...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}

func (s *sseWriter) raw(event string, data []byte) error {
	buf := make([]byte, 0, len(data)+len(event)+16)
	if event != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, event...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// workerHeader names the worker that served a response.
const workerHeader = "X-Switchyard-Worker"

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}
