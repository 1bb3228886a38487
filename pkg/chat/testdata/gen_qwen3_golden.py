#!/usr/bin/env python3
"""Golden prompts for the Qwen3 chat template, rendered the way the engine does.

Run by hand from the repository root when the cases or the template change:

    python3 pkg/chat/testdata/gen_qwen3_golden.py

Needs Python 3 and jinja2 (3.1.x; Debian: apt-get install -y python3-jinja2).
It reads pkg/tokenizer/qwen3_chat_template.jinja and
pkg/chat/testdata/qwen3_template_cases.json (OpenAI Chat Completions request
bodies) and writes pkg/chat/testdata/qwen3_golden/<case>.txt. A case's
optional "anthropic" body (the same conversation as Claude Code would send it)
is not read here: the Go test requires it to render to the same golden.
TestJinjaQwen3Golden renders the same bodies through the gateway's path
(DecodeChatCompletion -> Conversation -> JinjaTemplate) and requires byte
equality with these files.

What the engine does, and this script copies:
- Jinja environment as transformers' apply_chat_template builds it:
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
  extensions=[loopcontrols]); tojson = json.dumps(ensure_ascii=False, no key
  sorting); raise_exception and strftime_now globals.
- Messages as vLLM hands them to the template: content flattened to a
  string (null -> "", text parts joined with "\n" as vLLM joins them),
  tool_calls[].function.arguments parsed from their JSON string into a dict
  (key order kept).
- Tools as vLLM's pydantic model_dump() gives them: {"type", "function":
  {"name", "description", "parameters"}}, a missing description or
  parameters being None (JSON null).
"""
import json
import os
import sys
from datetime import datetime

from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(ROOT, "..", "..", "tokenizer", "qwen3_chat_template.jinja")
CASES = os.path.join(ROOT, "qwen3_template_cases.json")
OUT = os.path.join(ROOT, "qwen3_golden")


def environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def content_text(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content)


def message(m):
    out = {"role": m["role"], "content": content_text(m.get("content"))}
    if "reasoning_content" in m:
        out["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls"):
        calls = []
        for tc in m["tool_calls"]:
            fn = dict(tc["function"])
            fn["arguments"] = json.loads(fn["arguments"])
            calls.append({"id": tc["id"], "type": "function", "function": fn})
        out["tool_calls"] = calls
    if "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    if "name" in m:
        out["name"] = m["name"]
    return out


def tool(t):
    fn = t["function"]
    return {"type": "function", "function": {
        "name": fn["name"],
        "description": fn.get("description"),
        "parameters": fn.get("parameters"),
    }}


def main():
    with open(TEMPLATE, encoding="utf-8") as f:
        template = environment().from_string(f.read())
    with open(CASES, encoding="utf-8") as f:
        cases = json.load(f)
    os.makedirs(OUT, exist_ok=True)
    for case in cases:
        req = case["request"]
        kwargs = {}
        if req.get("tools"):
            kwargs["tools"] = [tool(t) for t in req["tools"]]
        text = template.render(
            messages=[message(m) for m in req["messages"]],
            add_generation_prompt=case["add_generation_prompt"],
            **kwargs,
        )
        with open(os.path.join(OUT, case["name"] + ".txt"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(case["name"], len(text.encode("utf-8")), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
