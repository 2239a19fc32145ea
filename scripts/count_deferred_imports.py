"""Measure the import structure of hudilite/ and dbt/adapters/hudilite/ (issue 20).

Lists project imports deferred into functions (a function-level import usually dodges a cycle), the import
cycles when those deferred imports count as edges, and private names (`_x`) imported across modules.

    python scripts/count_deferred_imports.py [--list] [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

PROJECT = ("hudilite", "dbt.adapters.hudilite")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_project(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PROJECT)


def resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(tree: ast.Module):
    """Yield (node, deferred, type_checking) for every import in the module."""

    def walk(node, deferred, tc):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, deferred, tc
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, True, tc)
            elif isinstance(child, ast.If) and _type_checking(child):
                yield from walk(child, deferred, True)
            else:
                yield from walk(child, deferred, tc)

    yield from walk(tree, False, False)


def scan(root: Path):
    files = sorted(p for d in ("hudilite", "dbt/adapters/hudilite") for p in (root / d).rglob("*.py"))
    modules = {module_name(root, p): p for p in files}
    deferred, edges, private = [], defaultdict(set), []
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node, is_deferred, tc in imports(tree):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            else:
                base = resolve(mod, is_pkg, node)
                targets = []
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append((sub if sub in modules else base, a.name))
            for target, name in targets:
                if not is_project(target):
                    continue
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if tc:
                    continue
                edges[mod].add(target)
                if is_deferred:
                    deferred.append((mod, node.lineno, target, name))
                if name and name.startswith("_") and not name.startswith("__") and target != mod:
                    private.append((mod, node.lineno, target, name))
    return modules, deferred, edges, private


def cycles(modules, edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in modules:
        if m not in index:
            visit(m)
    return sorted(out, key=len, reverse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    ap.add_argument("--list", action="store_true", help="list every deferred import and private name")
    args = ap.parse_args(argv)
    modules, deferred, edges, private = scan(args.root)
    # one import statement counts once, however many names it imports
    stmts = {(mod, line) for mod, line, _, _ in deferred}
    core = {s for s in stmts if s[0].startswith("hudilite")}
    print(f"deferred project import statements: {len(stmts)} (core {len(core)}, adapter {len(stmts) - len(core)})")
    if args.list:
        for mod, line, target, name in deferred:
            print(f"  {mod}:{line} -> {target}" + (f" ({name})" if name else ""))
    comps = cycles(modules, edges)
    print(f"import cycles counting deferred imports: {len(comps)}")
    for comp in comps:
        print(f"  {len(comp)} modules: {', '.join(comp)}")
    print(f"private names imported across modules: {len({(t, n) for _, _, t, n in private})}"
          f" ({len(private)} import sites)")
    if args.list:
        for mod, line, target, name in private:
            print(f"  {mod}:{line} {target}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
