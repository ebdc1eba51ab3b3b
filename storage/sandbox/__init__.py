"""The ``db_query`` sandbox: what the model may do to the database, and doing it.

Everything the model sends is checked before it reaches MongoDB: a fixed list of
operations, writes only to model-writable collections, no server-side JavaScript,
no other databases, no admin stages; numbers, nesting and stage counts within range
(``rules``); regular expressions that cannot backtrack for ever (``regex``, on the
tree of ``regex_tree``); no expression that grows a value without bound, and no write
that leaves a value longer than one answer can show (``growth``). The same checks run
whatever the server is, as pure functions apart from the execution (``execute``).

Every answer is bounded: rows and characters (``read`` stops reading the cursor at the
cap), and time: the server gets ``maxTimeMS`` on every command and the call itself gives
up after ``execute.CALL_TIMEOUT`` seconds even if the server stalls. A refusal is a
``SandboxError`` written so the model can correct its query.

This package names only what the tool's schema needs (``rules``): the checks and the
execution (``storage.sandbox.execute``, with ``growth``, ``read`` and the regex
parser) load with the first query, as most runs never make one (0.4 MiB and 0.1 s).
"""

from storage.sandbox.rules import DbOperation, IndexOptions, IndexSpec, SandboxError

__all__ = ["DbOperation", "IndexOptions", "IndexSpec", "SandboxError"]
