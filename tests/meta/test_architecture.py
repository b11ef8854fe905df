"""The structure docs/architecture.md describes, checked on the source itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sessions"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, ast.Module]:
    out: dict[str, ast.Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The ``sessions`` modules an ``from ... import ...`` names (typing-only ones too)."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    if not base.startswith("sessions"):
        return []
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    packages = {name for name in modules if (PACKAGE.parent / name.replace(".", "/")).is_dir()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(name, name in packages, node)
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return stack[stack.index(child) :] + [child]
            if child not in state and (found := visit(child)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_there_is_no_import_cycle_inside_sessions_typing_imports_included() -> None:
    graph = _import_graph()
    # The package's __init__ imports its submodules; a submodule importing `sessions`
    # itself would be a cycle through it and is caught too.
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _layer_table() -> dict[str, int]:
    """docs/architecture.md's layer table: file name (``_x.py``, ``cli/``) -> layer."""
    layers: dict[str, int] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| (\d+) \| (.+?) \| ", line)
        if row:
            for name in re.findall(r"`([^`]+)`", row.group(2)):
                layers[name] = int(row.group(1))
    return layers


def _row_of(module: str, layers: dict[str, int]) -> str:
    """The table's name for a module: its file (``_model/history.py``), else the nearest
    folder with a row (``cli/``, ``_engine/session/``); ``sessions`` -> ``__init__.py``."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__.py"
    path = "/".join(parts)
    candidates = [f"{path}.py", f"{path}/__init__.py"]
    candidates += ["/".join(parts[:n]) + "/" for n in range(len(parts), 0, -1)]
    return next((name for name in candidates if name in layers), candidates[0])


def layer_violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Imports of a module in a lower layer (a greater number) than the importer's, and
    modules with no row in the table."""
    found: list[str] = []
    for module in sorted(graph):
        row = _row_of(module, layers)
        if row not in layers:
            found.append(f"{module}: no row in docs/architecture.md")
            continue
        for target in sorted(graph[module]):
            there = _row_of(target, layers)
            if there != row and layers.get(there, -1) > layers[row]:
                found.append(
                    f"{module} (layer {layers[row]}) imports {target} (layer {layers[there]})"
                )
    return found


def test_every_import_goes_to_the_same_layer_or_one_above_as_architecture_md_says() -> None:
    layers = _layer_table()
    assert len(layers) > 30  # the table was read
    assert layer_violations(_import_graph(), layers) == []


def test_the_layer_check_finds_a_planted_upward_import_and_a_module_without_a_row() -> None:
    graph = {"sessions._model.backend": {"sessions._engine.session"}, "sessions._new": set()}
    layers = {"_model/backend.py": 0, "_engine/session/": 4}
    assert layer_violations(graph, layers) == [
        "sessions._model.backend (layer 0) imports sessions._engine.session (layer 4)",
        "sessions._new: no row in docs/architecture.md",
    ]


def _delegations(tree: ast.Module) -> set[int]:
    """Calls inside an ``apply`` method: a backend wrapping another one (like the write
    hooks of ``sessions.testing``) delegates to it, and is itself reached only through
    the commit path."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "apply":
            inside.update(id(call) for call in ast.walk(node) if isinstance(call, ast.Call))
    return inside


def test_nothing_outside_the_commit_path_calls_backend_apply() -> None:
    callers: list[str] = []
    for name, tree in _modules().items():
        delegations = _delegations(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "apply"
                and id(node) not in delegations
            ):
                callers.append(f"{name}:{node.lineno}")
    assert callers and all(c.startswith("sessions._engine.commit:") for c in callers), callers


def test_no_function_in_sessions_is_longer_than_60_lines() -> None:
    long: list[str] = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, long


MAX_MODULE_LINES = 600
MAX_CLASS_METHODS = 30


def oversized(sources: dict[str, str]) -> list[str]:
    """Modules over ``MAX_MODULE_LINES`` lines and classes with more than
    ``MAX_CLASS_METHODS`` methods (those defined in the class body, properties included)."""
    found: list[str] = []
    for name, text in sorted(sources.items()):
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = [
                    item
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
                if len(methods) > MAX_CLASS_METHODS:
                    found.append(f"{name}.{node.name}: {len(methods)} methods")
    return found


def test_no_module_in_sessions_is_over_600_lines_and_no_class_over_30_methods() -> None:
    sources = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts): path.read_text(
            encoding="utf-8"
        )
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert len(sources) > 30
    assert oversized(sources) == []


def test_the_size_check_finds_a_planted_long_module_and_a_planted_wide_class() -> None:
    wide = "class Wide:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(31))
    narrow = "class Narrow:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(30))
    long = "x = 1\n" * 601
    assert oversized({"a": wide, "b": narrow, "c": long, "d": "x = 1\n" * 600}) == [
        "a.Wide: 31 methods",
        "c: 601 lines",
    ]


ARCH_FOLDERS = re.compile(r"\| (`[^|]+`) \| (\d+)(?:–(\d+))? \| ")


def _folder_table() -> list[tuple[list[str], int, int]]:
    """docs/architecture.md's folder table: (names, lowest layer, highest layer), in order."""
    folders: list[tuple[list[str], int, int]] = []
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        row = ARCH_FOLDERS.match(line)
        if row:
            low = int(row.group(2))
            high = int(row.group(3) or low)
            folders.append((re.findall(r"`([^`]+)`", row.group(1)), low, high))
    return folders


def folder_violations(
    layers: dict[str, int], folders: list[tuple[list[str], int, int]]
) -> list[str]:
    """Rows whose layer lies outside their folder's range, and folders whose range starts
    below the end of the one listed before (the folders are the layers, in order)."""
    found: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    previous_high = -1
    for names, low, high in folders:
        if low < previous_high:
            found.append(f"{', '.join(names)}: layers {low}-{high} start below {previous_high}")
        previous_high = max(previous_high, high)
        ranges.update({name: (low, high) for name in names})
    for row, layer in sorted(layers.items()):
        top = row.split("/")[0] + ("/" if "/" in row else "")
        if top in ranges and not ranges[top][0] <= layer <= ranges[top][1]:
            low, high = ranges[top]
            found.append(f"{row}: layer {layer}, outside {top}'s {low}-{high}")
    return found


def test_every_folder_of_sessions_holds_only_its_own_layers_in_the_stated_order() -> None:
    folders = _folder_table()
    assert [names[0] for names, _, _ in folders][:2] == ["_model/", "_engine/"]
    assert folder_violations(_layer_table(), folders) == []


def test_the_folder_check_finds_a_planted_misplaced_module_and_an_overlapping_folder() -> None:
    folders = [(["_model/"], 0, 1), (["_engine/"], 2, 6), (["_tools/"], 5, 8)]
    layers = {"_model/history.py": 0, "_model/io.py": 3, "_engine/store.py": 4, "errors.py": 0}
    assert folder_violations(layers, folders) == [
        "_tools/: layers 5-8 start below 6",
        "_model/io.py: layer 3, outside _model/'s 0-1",
    ]
