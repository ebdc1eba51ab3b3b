"""The chat completions request body as JSON bytes, each tool schema encoded once.

Every request carries the same tool schemas (most of the body: several KB of JSON),
so each tool's encoding is kept by its name and description, with the schema it was
made from; an equal schema (a comparison of dicts, far cheaper than encoding them)
reuses it, and a request encodes only its messages. The bytes go to
the SDK as the request's ``content``: its own encoding of a ``body`` dict walks and
copies it first, which costs several times a plain ``json.dumps``. Headers, errors and
retries are the SDK's either way.

The encoding is ``json.dumps``, written as the SDK writes its own bodies: UTF-8, no
ASCII escapes, no spaces. Tool results and inbound text reach here cleaned
(``agent.conversation.loop``, ``channels.text``); should a lone surrogate slip through
anyway (valid in JSON as an escape, impossible in UTF-8), the body goes with ASCII
escapes instead of failing the turn.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent.llm.types import ToolSpec

KEEP = 256
"""Tool encodings kept: more than the tools offered at once (the core ones, MCP's)."""


def dumps(value: Any) -> str:
    """JSON as the SDK writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class RequestBodies:
    """Encodes request bodies; remembers the last ``KEEP`` tools' encodings."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._tools: OrderedDict[tuple[str, str], tuple[dict[str, Any], str]] = OrderedDict()

    def encode(
        self, model: str, messages: list[dict[str, Any]], tools: Sequence[ToolSpec] | None
    ) -> bytes:
        """``{"model", "messages"[, "tools"]}`` as JSON bytes; tools as function tools."""
        head = dumps({"model": model, "messages": messages})
        if tools:
            listed = ",".join(self._tool(t) for t in tools)
            head = f'{head[:-1]},"tools":[{listed}]}}'
        try:
            return head.encode()
        except UnicodeEncodeError:  # a lone surrogate: \ud800 in JSON, nothing in UTF-8
            return json.dumps(json.loads(head), separators=(",", ":")).encode()

    def _tool(self, spec: ToolSpec) -> str:
        key = (spec.name, spec.description)
        kept = self._tools.get(key)
        if kept is not None and kept[0] == spec.parameters:
            self._tools.move_to_end(key)
            return kept[1]
        text = dumps(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
        )
        self._tools[key] = (copy.deepcopy(spec.parameters), text)
        while len(self._tools) > self._keep:
            self._tools.popitem(last=False)
        return text

    def __len__(self) -> int:
        return len(self._tools)
