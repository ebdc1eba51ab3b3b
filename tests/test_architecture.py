"""The layout the README describes, checked: no import cycles, no module past the hard
limit of 800 lines, few modules at ``agent/``'s top level. (Layer order is
import-linter's, in pyproject.) Modules are split by concern, not by size: a module may
be long when it is one thing."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

from tests.source_tree import PACKAGES, ROOT, modules

MAX_LINES = 800


def test_no_module_imports_itself_through_others() -> None:
    """Imports inside functions count too: grimp reads every import statement."""
    graph = grimp.build_graph(*PACKAGES)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules((*PACKAGES, "tests", "bench"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_folder_has_a_family_of_three_modules_sharing_a_prefix() -> None:
    """Three ``sandbox_*`` files side by side are a package waiting to be named."""
    families: dict[str, list[str]] = {}
    for package in PACKAGES:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            by_prefix: dict[str, list[str]] = {}
            for module in folder.glob("*.py"):
                if not module.stem.startswith("__"):
                    by_prefix.setdefault(module.stem.split("_")[0], []).append(module.stem)
            for prefix, names in by_prefix.items():
                if len(names) >= 3:
                    families[f"{folder.relative_to(ROOT)}/{prefix}_*"] = sorted(names)
    assert families == {}


def test_agent_keeps_at_most_eight_modules_at_its_top_level() -> None:
    modules = sorted(p.name for p in (ROOT / "agent").glob("*.py"))
    assert len(modules) <= 8, modules
    concerns = {"conversation", "runs", "alerts", "tools", "llm", "app", "cli"}
    assert concerns <= {p.name for p in (ROOT / "agent").iterdir() if p.is_dir()}


def _imported_roots(tree: ast.Module) -> dict[str, str]:
    """Names bound by imports of modules from outside the project: name -> module."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in PACKAGES:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and _outside(node):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):  # an alias of one: ``cls = ssl.SSLContext``
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Attribute | ast.Name)
            and (root := _root(node.value)) in bound
        ):
            bound[node.targets[0].id] = f"{bound[root or '']} ({ast.unparse(node.value)})"
    return bound


def _outside(node: ast.ImportFrom) -> bool:
    """An absolute import from a module that is not the project's."""
    module = node.module or ""
    return node.level == 0 and module.split(".")[0] not in (*PACKAGES, "", "__future__")


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.endswith("__") for p in dotted.split("."))


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_sys_modules(node: ast.expr) -> bool:
    """``sys.modules``, or the finders that decide what an import loads."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("modules", "meta_path", "path_hooks")
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


MUTATORS = {
    *("update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"),
    *("insert", "append", "extend", "remove"),
}


def _dependency_misuse(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    imported = _imported_roots(tree)
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and _outside(node):
            names = [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{where} imports {name}" for name in names if _private(name)]
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _is_sys_modules(target.value):
                    found.append(f"{where} writes {ast.unparse(target.value)}")
                elif isinstance(target, ast.Attribute) and (root := _root(target)) in imported:
                    found.append(f"{where} sets an attribute of {imported[root or '']}")
                elif (
                    isinstance(target, ast.Attribute)
                    and _private(target.attr)
                    and _root(target) not in ("self", "cls")
                ):
                    found.append(f"{where} sets {ast.unparse(target)} from outside")
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
        ):
            found.append(f"{where} uses {imported[node.value.id]}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _is_sys_modules(node.func.value)
        ):
            found.append(f"{where} writes {ast.unparse(node.func.value)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and (_root(node.args[0]) in imported or _is_sys_modules(node.args[0]))
        ):
            found.append(f"{where} calls {node.func.id} on {ast.unparse(node.args[0])}")
    return found


def test_dependencies_are_used_through_their_public_api() -> None:
    """Product code imports no underscore module or name of another package, never
    writes ``sys.modules`` (nor the import finders), and sets no attribute of an
    imported module or class, nor an underscore attribute of another object: an
    upgrade of a dependency must not need a reading of its internals. (A private
    attribute read on an object, ``bot._post``, is beyond this scan: types, not
    syntax, say whose it is.)"""
    found = [problem for path in modules() for problem in _dependency_misuse(path)]
    assert found == []


def test_the_readme_stays_short() -> None:
    """What it is, quick start, using it, settings, how it works, in at most 400 lines;
    the benchmarks' sittings live in ``bench/RESULTS.md``."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400


def test_dependencies_are_compatible_ranges_but_the_two_pinned_on_purpose() -> None:
    """A security release of a dependency can be taken without reading its internals:
    nothing private is used. Exact pins only where DESIGN.md says so: neonize (its wheel
    re-downloads its Go library on a version mismatch) and SecantusDB (beta)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    shipped = [*project["dependencies"], *(r for k, v in extras.items() if k != "dev" for r in v)]
    exact = sorted({r.split("==")[0] for r in shipped if "==" in r})
    assert exact == ["SecantusDB", "neonize"]


def _root_name(node: ast.expr) -> str | None:
    """The name an attribute or item chain starts from (``ctx`` in ``ctx.a.b[1]``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_the_composition_root_fills_nothing_in_after_building_it() -> None:
    """Features declare their parts (``agent.app.application.Parts``: burst rules, owner
    listeners, routes, status sections...) and the root builds each part once: no code
    in ``agent/app`` assigns to an attribute or item of what a feature is handed
    (``ctx``) or of what the root built (``core``, ``app``). The channels' messages reach
    the pipeline through the intake's queue, and the scheduler's engine gets its runner
    at its start: nothing in ``agent/app`` makes a future to hand one part to another
    once built."""
    handed = {"ctx", "core", "app"}
    filled: list[str] = []
    for path in sorted((ROOT / "agent" / "app").rglob("*.py")):
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute | ast.Subscript)
                    and _root_name(target) in handed
                ):
                    filled.append(f"{where}:{node.lineno}")
    for path in sorted((ROOT / "agent" / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("create_future", "set_result"):
                filled.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert filled == []
