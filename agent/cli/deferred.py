"""Packages whose ``__init__`` runs only when something asks it for a name.

The OpenAI SDK's ``import openai`` runs ``openai/types/__init__.py``, which imports
every type of every API (about 400 modules of pydantic models: the Responses API,
evals, graders, realtime), and ``openai.lib`` imports one module of
``openai.types.responses``, whose ``__init__`` imports the other 246. The agent uses
chat completions and transcriptions only, and reads the answers as plain JSON
(``cast_to=object``). Deferred, those ``__init__`` files do not run: ``import
openai`` takes ~10 MiB and ~0.4 s less, measured on this machine.

A deferred package is imported when asked for, in the same order as without
deferral, but its ``__init__`` does not run; its ``__path__`` is set, so its submodules
import as usual (``from openai.types.chat.chat_completion import ...`` loads that
module alone). The first attribute it does not yet have (``openai.types.Completion``,
``from openai.types.chat import X``) runs the real ``__init__`` in the same module
object, once, under a lock; from then on it is the package as if imported normally.
While that ``__init__`` runs, its own lookups of names not yet set fail as they do for
any partly initialised module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Iterable, Sequence
from typing import Any

OPENAI_TYPES = ("openai.types", "openai.types.responses", "openai.types.shared")
"""What ``import openai`` would run for nothing: the type indexes of every API.
(``openai.types.chat`` and ``shared_params`` are asked for names by ``openai.lib`` at
once, so deferring them would change nothing.)"""


class _Init:
    """A deferred package's pending ``__init__``, and the thread running it, if any."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader
        self.lock = threading.Lock()
        self.runner: int | None = None


class DeferredPackage(types.ModuleType):
    """A package module whose ``__init__`` runs at its first missing attribute."""

    def __getattr__(self, name: str) -> Any:
        init: _Init | None = self.__dict__.get("__deferred_init__")
        if init is None or init.runner == threading.get_ident():
            # Loaded; or this thread's own __init__, under way, finds only the names
            # it has set so far, as in any partly initialised module.
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        with init.lock:  # another thread running it: wait for it
            if "__deferred_init__" in self.__dict__:
                _run_init(self, init)
        return getattr(self, name)  # now the package as loaded: its names, its hook


def _run_init(module: DeferredPackage, init: _Init) -> None:
    init.runner = threading.get_ident()
    try:
        init.loader.exec_module(module)
    finally:
        init.runner = None
    del module.__dict__["__deferred_init__"]


class _DeferringLoader(importlib.abc.Loader):
    """Makes the package module as its own loader would, and runs nothing yet."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = DeferredPackage
        module.__dict__["__deferred_init__"] = _Init(self.loader)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self.loader, name)


class _Deferring(importlib.abc.MetaPathFinder):
    """Finds the named packages where the path finder does, with deferred loaders.

    Only when the import system asks for them, so their parents are imported first and
    in their own order, as without deferral."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return None
        spec.loader = _DeferringLoader(spec.loader)
        return spec


def defer_package_inits(names: Iterable[str]) -> None:
    """From now on, these packages (when imported at all) run their ``__init__`` at
    their first missing attribute. Call before anything imports them; a package
    already imported is not changed. Calling again with the same names does nothing."""
    wanted = frozenset(names)
    if any(isinstance(f, _Deferring) and f.names == wanted for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Deferring(wanted))
