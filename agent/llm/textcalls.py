"""Tool calling in plain text, for OpenAI-compatible servers without native tools.

Some local servers (Ollama models without a tool template, vLLM started without
``--enable-auto-tool-choice``) reject the ``tools`` parameter. The model can still
call tools if the system prompt teaches it a text protocol: it answers with
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, and results
come back as ``<tool_result name="...">{json}</tool_result>`` in a user message.
Everything here is pure so the protocol can be tested without a server.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from agent.llm.types import ToolSpec

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

_UNSUPPORTED = re.compile(
    r"does not support (?:native )?(?:tools|tool[ _-]?(?:calls?|calling|use)|function[ _-]?calling"
    r"|functions)"
    r"|(?:tools|tool[ _-]?(?:calls?|calling|use)|function[ _-]?calling|functions)['\"]? (?:is|are)"
    r" not supported"
    r"|tool_choice"
    r"|enable-auto-tool-choice"
    r"|unrecognized request argument supplied: (?:tools|tool_choice|functions)",
    re.IGNORECASE,
)
_NOT_ABOUT_TOOLS = re.compile(
    r"context[ _-]?length|maximum context|too many tokens|prompt is too long|max_tokens",
    re.IGNORECASE,
)

_INSTRUCTIONS = """\
## Tools
You can call these tools. Each line gives a tool's name, what it does, and the JSON \
schema of its arguments:
{lines}

To call a tool, answer with one block per call, and nothing else:
<tool_call>{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}</tool_call>
You may put several blocks in one answer. Results come back in \
<tool_result name="..."> blocks. When you have what you need, answer the user in \
plain text without any <tool_call> block."""


@dataclass(frozen=True)
class TextCall:
    """One call parsed from text: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]


def tools_unsupported(status: int | None, detail: str) -> bool:
    """Whether an HTTP error means "this server/model cannot take native tools".

    Only a 400 (or 422, which some servers use for unknown fields) whose text names
    tools counts; other client errors (context length, bad payload, unknown model)
    must surface as ordinary failures rather than silently change the protocol.
    """
    if status not in (400, 422):
        return False
    if _NOT_ABOUT_TOOLS.search(detail):
        return False
    return bool(_UNSUPPORTED.search(detail))


def tool_prompt(tools: list[ToolSpec]) -> str:
    """The system-prompt section that teaches the text protocol (one line per tool)."""
    lines = "\n".join(
        f"- {t.name}: {t.description.strip()} "
        f"{json.dumps(t.parameters, ensure_ascii=False, separators=(',', ':'))}"
        for t in tools
    )
    return _INSTRUCTIONS.format(lines=lines)


def parse_tool_calls(text: str) -> tuple[str, list[TextCall]]:
    """Split an answer into its remaining text and the tool calls it contains.

    A block whose content is not a JSON object with a string ``name`` is left in
    the text, so the user still sees what the model wrote instead of losing it.
    """
    calls: list[TextCall] = []

    def take(match: re.Match[str]) -> str:
        call = _parse_block(match.group(1))
        if call is None:
            return match.group(0)
        calls.append(call)
        return ""

    rest = _BLOCK.sub(take, text)
    return rest.strip(), calls


def _parse_block(body: str) -> TextCall | None:
    fenced = _FENCE.match(body.strip())
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return TextCall(name=data["name"], arguments=arguments)


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """An earlier call as the model would have written it, for replaying history."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>{payload}</tool_call>"


def render_tool_result(name: str, result: dict[str, Any]) -> str:
    """A tool's result as the text block the model was told to expect."""
    payload = json.dumps(result, ensure_ascii=False, default=str)
    return f'<tool_result name="{name}">{payload}</tool_result>'
