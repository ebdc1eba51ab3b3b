"""Fitting stored history into the input-token budget.

Token counts are estimated once, when a message is stored, so fitting history
costs no tokenising per request. The estimate mimics the o200k/cl100k pieces
(words, digits, CJK characters, symbols) and errs on the high side: measured
against o200k it counts 1.05-1.4x the real tokens across English, German,
Russian, Chinese, code, JSON and emoji (tests/agent/conversation/test_history.py),
so the budget is never overrun. Loading the real o200k table would cost ~65 MB of
resident memory for a number that only needs to be safe, not exact.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from agent.llm.types import (
    MediaPart,
    ModelMessage,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

TOOL_OUTPUT_KEEP = 1_200
"""Characters of an old tool result kept in history; the current exchange keeps all."""

_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff"
_PIECE = re.compile(rf"[A-Za-z]+|[{_CJK}]|[^\W\d_A-Za-z{_CJK}]+| ?\d+|\s+|[^\w\s]")


def estimate_tokens(text: str) -> int:
    """A conservative estimate of the o200k token count of ``text``."""
    total = 0
    for match in _PIECE.finditer(text):
        piece = match.group()
        first = piece[0]
        if first.isascii() and first.isalpha():
            total += 1 + len(piece) // 9  # common English words are one token
        elif first.isdigit() or piece[-1].isdigit():
            # Digits go in groups of up to three; a space before them is its own token.
            digits = piece.lstrip()
            total += math.ceil(len(digits) / 3) + (len(piece) > len(digits))
        elif first.isspace():
            total += 0 if len(piece) == 1 else 1  # a single space joins the next word
        elif first.isalpha():
            # A CJK character (always its own piece) is about one token; words in other
            # scripts split into more pieces than English ones.
            total += 1 + len(piece) // 4
        else:
            total += 2 if not first.isascii() else 1  # emoji and symbols; punctuation
    return total


def message_text(message: ModelMessage) -> str:
    chunks: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | NotePart):
            chunks.append(part.text)
        elif isinstance(part, ToolCallPart):
            chunks.append(part.name + json.dumps(part.arguments, default=str))
        elif isinstance(part, MediaPart):
            chunks.append(part.fallback_text())  # what history keeps of it
        else:
            chunks.append(json.dumps(part.result, default=str))
    return "\n".join(chunks)


def message_tokens(message: ModelMessage) -> int:
    return estimate_tokens(message_text(message)) + 4


def shorten_tool_results(message: ModelMessage, keep: int = TOOL_OUTPUT_KEEP) -> ModelMessage:
    """Old tool outputs are cut to ``keep`` characters; the model can query again."""
    if message.role != "tool":
        return message
    parts: list[Any] = []
    changed = False
    for part in message.parts:
        if isinstance(part, ToolResultPart):
            raw = json.dumps(part.result, default=str)
            if len(raw) > keep:
                changed = True
                part = part.model_copy(
                    update={"result": {"truncated": raw[:keep], "note": "shortened in history"}}
                )
        parts.append(part)
    return message.model_copy(update={"parts": parts}) if changed else message


CUT_EVERY = 20
"""Stored history is cut only where a block of this many messages (by ``seq``) begins:
its start then stays put for several exchanges, and the providers' prompt caches,
which match a request's repeated start, keep matching; a cut that moved with every
exchange would make all the history new to them each time."""


def fit_history(
    messages: list[ModelMessage],
    tokens: list[int],
    budget: int,
    seqs: Sequence[int] | None = None,
    every: int = CUT_EVERY,
) -> list[ModelMessage]:
    """Keep the newest messages whose total fits ``budget``, dropping oldest turns first.

    With their stored ``seqs``, the kept part starts at the first block boundary
    (``every`` messages) that fits, so it moves only when the history outgrows it.
    History always starts at a user message, so a tool result is never separated
    from the call that produced it.
    """
    total = 0
    start = len(messages)
    for i in range(len(messages) - 1, -1, -1):
        if total + tokens[i] > budget:
            break
        total += tokens[i]
        start = i
    if seqs is not None and start > 0:
        bounds = (i for i in range(start, len(messages)) if seqs[i] // every > seqs[i - 1] // every)
        start = next(bounds, start)
    while start < len(messages) and messages[start].role != "user":
        start += 1
    return [shorten_tool_results(m) for m in messages[start:]]
