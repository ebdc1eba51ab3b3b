"""Defers SecantusDB's geometry support until a geo operator needs it.

SecantusDB 0.7.0b3 imports ``secantus.geo`` and ``secantus.geo_index`` as it starts,
and with them Shapely, NumPy and s2sphere: ~19 MiB of the embedded server's memory
and ~0.4 s of its start, for operators Watchkeeper does not use (``$near``,
``$geoWithin``, ``2dsphere`` indexes). ``defer_geo()`` puts stand-ins for those two
modules in ``sys.modules`` before ``secantus`` is imported. Each name SecantusDB
imports from them at start-up is a forwarder; the first call through one, or any
other attribute, executes the real module into the stand-in, so geo queries still
work (the first one pays the import).

``GeoError`` is the one class imported at start-up (for ``except`` clauses): the
stand-in's class stays in place after loading, so the real functions raise it.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

GEO = "secantus.geo"
GEO_INDEX = "secantus.geo_index"
FORWARDED: dict[str, tuple[str, ...]] = {
    GEO: ("parse_doc_geometry", "parse_query_geometry", "validate_coordinates"),
    GEO_INDEX: (
        "encode_cell",
        "planar_2d_covering_ranges",
        "planar_2d_index_for_point",
        "s2_doc_covering",
        "s2_query_covering",
    ),
}
"""Functions SecantusDB imports from the geo modules when it starts (its storage module)."""


class GeoError(ValueError):
    """Malformed query geometry. Surfaced as ``BadValue`` to the client."""


class DeferredModule(types.ModuleType):
    """A module whose real code runs on first use."""

    def __init__(self, name: str, kept: dict[str, Any]) -> None:
        super().__init__(name)
        self._deferred_lock = threading.Lock()
        self._deferred_kept = kept
        self._deferred_loaded = False
        self.__dict__.update(kept)

    def __getattr__(self, name: str) -> Any:  # only for names not (yet) defined
        if name.startswith("_deferred_") or name.startswith("__"):
            raise AttributeError(name)
        self.load()
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None

    def load(self) -> None:
        with self._deferred_lock:
            if self._deferred_loaded:
                return
            package, _, leaf = self.__name__.rpartition(".")
            spec = importlib.machinery.PathFinder.find_spec(
                self.__name__, list(sys.modules[package].__path__)
            )
            if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
                raise ImportError(f"cannot find the real {self.__name__}")
            code = spec.loader.get_code(self.__name__)
            self.__dict__.update(__spec__=spec, __file__=spec.origin, __loader__=spec.loader)
            exec(code, self.__dict__)  # the package's own module code
            self.__dict__.update(self._deferred_kept)
            setattr(sys.modules[package], leaf, self)
            self._deferred_loaded = True


def _forwarder(module: DeferredModule, name: str) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        module.load()
        real = module.__dict__[name]
        if real is forward:
            raise ImportError(f"{module.__name__} has no function {name!r}")
        return real(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


def defer_geo() -> bool:
    """Install the stand-ins; False (and nothing done) if ``secantus`` is already imported."""
    if "secantus" in sys.modules or GEO in sys.modules:
        return False
    geo = DeferredModule(GEO, {"GeoError": GeoError})
    index = DeferredModule(GEO_INDEX, {})
    for module in (geo, index):
        for name in FORWARDED[module.__name__]:
            setattr(module, name, _forwarder(module, name))
        sys.modules[module.__name__] = module
    return True
