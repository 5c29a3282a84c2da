"""Structural checks that import-linter does not make (run by scripts/test.sh):

* no import cycle among changelake modules, counting every import: module level, inside
  functions and under ``TYPE_CHECKING``;
* no function-local import of a changelake module (a cycle dodged is a cycle kept);
* no module over MAX_MODULE_LINES lines, and the Session facade under MAX_SESSION_LINES.

Usage: python scripts/check_structure.py [SRC_DIR]   (default: src)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "changelake"
MAX_MODULE_LINES = 500
MAX_SESSION_LINES = 150


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(node: ast.AST, current: str, is_package: bool, known: set[str]) -> list[str]:
    """The changelake modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = current.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        # `from pkg import mod` loads pkg.mod when it is a module, else a name of pkg
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
        return []
    found = []
    for name in names:
        while name and name not in known:  # `import a.b.c` where c is an attribute
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name in known:
            found.append(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(src: str = "src") -> int:
    root = Path(src)
    paths = sorted((root / PACKAGE).rglob("*.py"))
    known = {module_name(root, p) for p in paths}
    graph: dict[str, set[str]] = {}
    problems: list[str] = []
    for path in paths:
        name = module_name(root, path)
        text = path.read_text()
        tree = ast.parse(text)
        is_package = path.name == "__init__.py"
        graph[name] = set()
        for node in ast.walk(tree):
            targets = imported(node, name, is_package, known)
            graph[name].update(t for t in targets if t != name)
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(func):
                    for target in imported(node, name, is_package, known):
                        problems.append(f"{path}:{node.lineno}: function-local import of {target}")
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            problems.append(f"{path}: {lines} lines (limit {MAX_MODULE_LINES}): split it")
        for node in tree.body:
            if (
                isinstance(node, ast.ClassDef)
                and name == f"{PACKAGE}.session"
                and node.name == "Session"
            ):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_SESSION_LINES:
                    problems.append(f"{path}: Session is {size} lines (limit {MAX_SESSION_LINES})")
    for component in cycles(graph):
        problems.append("import cycle: " + " -> ".join(component))
    for problem in problems:
        print(problem)
    edges = sum(len(v) for v in graph.values())
    print(f"check_structure: {len(graph)} modules, {edges} imports, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
