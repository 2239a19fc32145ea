"""The import structure of the core (issue 20): the import-linter contracts in .importlinter hold, no import cycle
hides in function-level imports, and core modules do not import the package root."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import count_deferred_imports as structure  # noqa: E402


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports not installed: pip install -e '.[test]'")
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_no_hidden_cycles_in_the_core():
    modules, _, edges, _ = structure.scan(ROOT)
    core = [c for c in structure.cycles(modules, edges) if any(m.startswith("hudilite") for m in c)]
    assert core == []


def test_core_modules_do_not_import_the_package_root():
    """`from hudilite import x` where x is not a submodule runs hudilite/__init__.py, the public API, from below."""
    offenders = []
    for path in sorted((ROOT / "hudilite").rglob("*.py")):
        if path == ROOT / "hudilite" / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "hudilite":
                for a in node.names:
                    pkg = ROOT / "hudilite" / a.name
                    if not (pkg.with_suffix(".py").exists() or (pkg / "__init__.py").exists()):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {a.name}")
    assert offenders == []


def test_every_core_module_has_a_layer():
    """A module left out of the layers contract is unconstrained: each one under hudilite/ must be named in it,
    itself or through a package."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = {m.strip() for line in cfg["importlinter:contract:layers"]["layers"].split("\n") for m in line.split(":")
              if m.strip()}
    missing = []
    for path in sorted((ROOT / "hudilite").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            if not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.parse(path.read_text()).body):
                continue  # a package docstring: its modules are layered one by one
            parts = parts[:-1]
        if len(parts) == 1:  # the package root: the public API, above every layer
            continue
        if not any(".".join(parts[:n]) in layers for n in range(2, len(parts) + 1)):
            missing.append(".".join(parts))
    assert missing == []


# The public modules (docs/api.md); the adapter, the CLI and the streaming sink may import only these
# (contract public-api).
PUBLIC_MODULES = ("hudilite", "hudilite.api", "hudilite.errors", "hudilite.options", "hudilite.columns",
                  "hudilite.checkpoints", "hudilite.aggregate", "hudilite.prepared", "hudilite.streaming",
                  "hudilite.spark.session", "hudilite.spark.schema", "hudilite.spark.results",
                  "hudilite.metastore", "hudilite.warehouse", "hudilite.server", "hudilite.sql_merge",
                  "hudilite.sql_dml", "hudilite.storage")


def test_every_core_module_is_public_or_forbidden_to_the_adapter():
    """A new internal module left out of the public-api contract's forbidden list would be open to the adapter
    and the CLI: each module under hudilite/ is public (docs/api.md) or forbidden there, itself or through a
    package; the entry points (cli, the package root) are neither."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    forbidden = {m.strip() for m in cfg["importlinter:contract:public-api"]["forbidden_modules"].split("\n")
                 if m.strip()}
    assert not forbidden & set(PUBLIC_MODULES)
    doc = (ROOT / "docs" / "api.md").read_text()
    assert [m for m in PUBLIC_MODULES if f"`{m}`" not in doc] == []
    covered = forbidden | set(PUBLIC_MODULES[1:]) | {"hudilite.cli"}
    missing = []
    for path in sorted((ROOT / "hudilite").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            if not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.parse(path.read_text()).body):
                continue  # a package docstring: its modules are checked one by one
            parts = parts[:-1]
        if len(parts) == 1:
            continue
        if not any(".".join(parts[:n]) in covered for n in range(2, len(parts) + 1)):
            missing.append(".".join(parts))
    assert missing == []
