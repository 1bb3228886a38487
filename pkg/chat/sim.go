package chat

import (
	"encoding/json"
	"sort"
)

// SimulatedToolCall is the text a model would generate to call t, with
// placeholder arguments built from the schema's required properties (zero
// values of their types). Simulated engines append its tokens to their
// output so that agent-shaped traffic (call, result, answer) can flow without
// a real model.
func SimulatedToolCall(t Tool) (ToolCall, string) {
	var schema struct {
		Type       any `json:"type"`
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(t.Parameters, &schema) // a bad schema just gets no arguments
	args := map[string]any{}
	req := append([]string(nil), schema.Required...)
	sort.Strings(req)
	for _, name := range req {
		typ, _ := schema.Properties[name].Type.(string)
		switch typ {
		case "integer", "number":
			args[name] = 0
		case "boolean":
			args[name] = false
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = ""
		}
	}
	a, _ := marshalNoEscape(args)
	if typ, _ := schema.Type.(string); typ == "string" {
		a = `""` // a freeform tool takes a string
	}
	tc := ToolCall{Name: t.Name, Arguments: a}
	var b promptBuilder
	b.text(toolCallOpen + "\n")
	_ = writeCall(&b, tc)
	b.text("\n" + toolCallClose)
	b.flush()
	return tc, b.p.String()
}
