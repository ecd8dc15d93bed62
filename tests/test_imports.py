"""The package's import graph, read from the source: no circle, no import of the package face from inside, no private name
shared across modules, the core importing nothing outside it, and the Lambda functions imported by none of the library.

Every import counts, at module top, inside a function or under ``TYPE_CHECKING``: a circle a function-level import
hides still ties the modules in it to each other, and a type checker follows the ``TYPE_CHECKING`` ones.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "lambda_src"
PACKAGE = "tally"
FUNCTIONS = f"{PACKAGE}.functions"  # the Lambda functions' entry points
LOCAL = f"{PACKAGE}.local"  # the local toolkit: runs the functions on this machine, as Lambda and API Gateway do


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module the import runs
    name: str | None  # the name taken from it (``from target import name``), None for ``import target``
    line: int
    from_face: bool = False  # ``from tally import ...``, a submodule or not

    def where(self) -> str:
        return f"{self.importer}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def sources() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((SOURCE / PACKAGE).rglob("*.py"))}


MODULES = sources()


def known(dotted: str) -> str | None:
    """The longest prefix of DOTTED that is one of the package's modules."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:end])) in MODULES:
            return prefix
    return None


def imports_of(module: str, path: Path) -> list[Import]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := known(alias.name)) is not None:
                    found.append(Import(module, target, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package_of(module, path).split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                face = base == PACKAGE
                if submodule in MODULES:
                    found.append(Import(module, submodule, None, node.lineno, face))
                else:
                    found.append(Import(module, base, alias.name, node.lineno, face))
    return found


def private_attributes_of(module: str, path: Path) -> list[str]:
    """``other_module._name`` read through a module an import bound to a name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    continue
                if alias.asname:  # import tally.x as y: y is tally.x
                    bound[alias.asname] = alias.name
                else:  # import tally.x: the name bound is tally
                    bound[PACKAGE] = PACKAGE
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute) and (head := dotted(node.value)) is not None:
            return f"{head}.{node.attr}"
        return None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = dotted(node.value)
            if owner is not None and owner in MODULES and owner != module:
                found.append(f"{module}:{node.lineno} reads {owner}.{node.attr}")
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


IMPORTS = [found for module, path in MODULES.items() for found in imports_of(module, path)]


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in IMPORTS:
        if found.target != found.importer:
            edges[found.importer].add(found.target)
    return edges


def groups_of(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm): each module of one reaches every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    return groups


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest circle through each strongly connected group of modules (a breadth-first walk from its first)."""
    found = []
    for group in groups_of(edges):
        start, members = group[0], set(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            module = queue.pop(0)
            for target in sorted(edges[module] & members):
                if target == start:
                    found.append([*paths[module], start])
                    queue = []
                    break
                if target not in paths:
                    paths[target] = [*paths[module], target]
                    queue.append(target)
    return found


def test_the_source_is_read_whole():
    # The walk sees the modules the package is made of, and the imports in them (a broken walk would pass everything).
    assert {"tally", "tally.core.settings", "tally.functions.stream_handler", "tally.local.aws"} <= set(MODULES)
    assert any(found.importer == "tally.functions.stream_handler" and found.target.startswith("tally.core.") for found in IMPORTS)
    # An import inside a function is read too: the local toolkit's of the stream function is one.
    assert any(found.importer == "tally.local.aws" and found.target == "tally.functions.stream_handler" for found in IMPORTS)


def test_a_circle_is_found_where_there_is_one():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_another_that_imports_it_back():
    edges = graph()
    found = [
        " -> ".join(circle) + f"  (of the modules {', '.join(group)}, each reached from the others)"
        for circle, group in zip(circles(edges), groups_of(edges), strict=True)
    ]
    assert found == [], "import circles:\n" + "\n".join(found)


def test_no_module_inside_the_package_imports_the_package_face():
    # `from tally import Reader` is for the package's users; a module inside imports the module that defines the name,
    # and a submodule by its own name (`import tally.functions.stream_handler`, `from tally.functions.stream_handler import ...`).
    face = [
        f"{found.where()} takes {found.name or found.target} from {PACKAGE}"
        for found in IMPORTS
        if (found.from_face or found.target == PACKAGE) and found.importer != PACKAGE
    ]
    assert face == []


def test_no_private_name_is_imported_across_modules():
    taken = [
        f"{found.where()} takes {found.target}.{found.name}"
        for found in IMPORTS
        if found.name is not None and is_private(found.name) and found.target != found.importer
    ]
    read = [line for module, path in MODULES.items() for line in private_attributes_of(module, path)]
    assert taken + read == []


@pytest.mark.parametrize("module", sorted(name for name in MODULES if name.startswith(f"{PACKAGE}.core")))
def test_the_core_imports_nothing_outside_it(module):
    outside = sorted({found.target for found in IMPORTS if found.importer == module and not found.target.startswith(f"{PACKAGE}.core")})
    assert outside == []


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


@pytest.mark.parametrize(
    "module", sorted(name for name in MODULES if not within(name, FUNCTIONS) and not within(name, LOCAL))
)
def test_the_library_imports_no_lambda_function(module):
    # tally/functions wires the library to AWS and may import any of it; the library never imports a function back,
    # so each function's wiring lies in its module there alone. The local toolkit runs the functions here, as Lambda
    # and API Gateway do, so it may call them.
    taken = sorted({found.target for found in IMPORTS if found.importer == module and within(found.target, FUNCTIONS)})
    assert taken == []
