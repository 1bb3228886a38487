package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// JinjaTemplate renders a model's own chat template (the chat_template of
// its tokenizer_config.json), the way transformers' apply_chat_template does,
// so the prompt is byte-identical to what the engine would render. Values are
// built in the client's key order (Python dicts keep insertion order, and
// tojson of tools and arguments shows it), and tool-call arguments are passed
// as parsed objects, as vLLM does.
//
// The rendered text is cut into segments at the special tokens the template
// itself writes (any "<|…|>" the tokenizer knows as an added token). One
// spelled inside the conversation's strings (a user's text, a file a tool
// read) stays text, as the package promises: an engine tokenizing the
// rendered string would take it for the token, so a client could end its
// turn and open a system one. The prompt's text is the same either way.
type JinjaTemplate struct {
	t         *jinja.Template
	isSpecial func(string) bool
	// Extra variables some templates read (bos_token, eos_token, ...).
	vars map[string]string
}

var _ Template = (*JinjaTemplate)(nil)

// NewJinjaTemplate compiles source. isSpecial says whether a "<|…|>" string
// is a special token (nil: none is); vars are extra string variables.
func NewJinjaTemplate(source string, isSpecial func(string) bool, vars map[string]string) (*JinjaTemplate, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat: compile template: %w", err)
	}
	if isSpecial == nil {
		isSpecial = func(string) bool { return false }
	}
	return &JinjaTemplate{t: t, isSpecial: isSpecial, vars: vars}, nil
}

// TemplateFromConfig extracts the chat template from a tokenizer_config.json
// (its "chat_template" is a string, or a list of named templates of which
// "default" is used).
func TemplateFromConfig(config []byte) (string, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		return "", fmt.Errorf("chat: tokenizer_config.json: %w", err)
	}
	var s string
	if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil && s != "" {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err == nil {
		for _, n := range named {
			if n.Name == "default" {
				return n.Template, nil
			}
		}
	}
	return "", errors.New("chat: tokenizer_config.json has no chat_template")
}

// Render implements Template.
func (j *JinjaTemplate) Render(c *Conversation, generationPrompt bool) (Prompt, error) {
	msgs := make([]jinja.Value, 0, len(c.Messages))
	for _, m := range c.Messages {
		d := jinja.NewDict()
		dict := d.AsDict()
		dict.Set("role", untrusted(m.Role))
		dict.Set("content", untrusted(m.Content))
		if m.Reasoning != "" {
			dict.Set("reasoning_content", untrusted(m.Reasoning))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, 0, len(m.ToolCalls))
			for _, tc := range m.ToolCalls {
				fn := jinja.NewDict()
				fn.AsDict().Set("name", untrusted(tc.Name))
				args, err := jsonValue([]byte(tc.Arguments))
				if err != nil || !args.IsDict() {
					args = untrusted(tc.Arguments)
				}
				fn.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				if tc.ID != "" {
					call.AsDict().Set("id", untrusted(tc.ID))
				}
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls = append(calls, call)
			}
			dict.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			dict.Set("tool_call_id", untrusted(m.ToolCallID))
		}
		if m.Name != "" {
			dict.Set("name", untrusted(m.Name))
		}
		msgs = append(msgs, d)
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"add_generation_prompt": jinja.NewBool(generationPrompt),
	}
	for k, v := range j.vars {
		data[k] = jinja.NewString(v)
	}
	if len(c.Tools) > 0 {
		tools := make([]jinja.Value, 0, len(c.Tools))
		for _, t := range c.Tools {
			// The shape of vLLM's tool model (model_dump): name, then
			// description and parameters, null when the client sent none.
			fn := jinja.NewDict()
			fn.AsDict().Set("name", untrusted(t.Name))
			desc := jinja.None()
			if t.Description != "" || t.HasDescription {
				desc = untrusted(t.Description)
			}
			fn.AsDict().Set("description", desc)
			params := jinja.None()
			if len(bytes.TrimSpace(t.Parameters)) > 0 {
				v, err := jsonValue(t.Parameters)
				if err != nil {
					return nil, fmt.Errorf("chat: tool %q parameters: %w", t.Name, err)
				}
				params = v
			}
			fn.AsDict().Set("parameters", params)
			tool := jinja.NewDict()
			tool.AsDict().Set("type", jinja.NewString("function"))
			tool.AsDict().Set("function", fn)
			tools = append(tools, tool)
		}
		data["tools"] = jinja.NewList(tools)
	}
	out, err := j.t.RenderValues(data)
	if err != nil {
		return nil, fmt.Errorf("chat: render template: %w", err)
	}
	p := splitSpecials(out, j.isSpecial)
	for i := range p {
		if !p[i].Special {
			p[i].Text = unguard(p[i].Text)
		}
	}
	return p, nil
}

// guardMark is put between the '<' and '|' of every "<|" in the
// conversation's strings before the template sees them (guard), so that
// splitSpecials finds no special token there, and is taken out of the
// rendered text after (unguard). A noncharacter, it is in no template; one
// a client sends is doubled. (A template that measures or slices a string
// sees the marks: none of the models' templates does so.)
const guardMark = "\uFDD0"

// guard marks s's "<|" (see guardMark).
func guard(s string) string {
	if !strings.Contains(s, "<|") && !strings.Contains(s, guardMark) {
		return s
	}
	s = strings.ReplaceAll(s, guardMark, guardMark+guardMark)
	return strings.ReplaceAll(s, "<|", "<"+guardMark+"|")
}

// unguard undoes guard in rendered text: a doubled mark was the client's
// own, a single one (always before a '|') was put there.
func unguard(s string) string {
	if !strings.Contains(s, guardMark) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, guardMark)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i+len(guardMark):]
		if strings.HasPrefix(s, guardMark) {
			b.WriteString(guardMark)
			s = s[len(guardMark):]
		}
	}
}

// untrusted is a string of the conversation as a template value, guarded.
func untrusted(s string) jinja.Value { return jinja.NewString(guard(s)) }

// splitSpecials cuts text at every "<|…|>" that isSpecial accepts.
func splitSpecials(s string, isSpecial func(string) bool) Prompt {
	var p Prompt
	start := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], "<|")
		if k < 0 {
			break
		}
		k += i
		e := strings.Index(s[k+2:], "|>")
		if e < 0 {
			break
		}
		end := k + 2 + e + 2
		if tok := s[k:end]; isSpecial(tok) {
			if k > start {
				p = append(p, Segment{Text: s[start:k]})
			}
			p = append(p, Segment{Text: tok, Special: true})
			start = end
			i = end
			continue
		}
		i = k + 2
	}
	if start < len(s) {
		p = append(p, Segment{Text: s[start:]})
	}
	return p
}

// jsonValue decodes JSON into Jinja values, keeping object key order.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(guard(key), v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", t)
	case string:
		return untrusted(t), nil
	case json.Number:
		if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected token %v", tok)
}
