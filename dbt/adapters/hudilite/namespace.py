"""`{{ hudilite.changes(...) }}` / `{{ hudilite.as_of(...) }}` / `{{ hudilite.read(...) }}` in model SQL.

dbt only exposes *installed packages* as `<package>.<macro>`; the macros of an adapter plugin are global
(`hudilite_changes(...)`, also `dbt.hudilite_changes(...)`). This adds one read-only name, `hudilite`, at the
end of dbt's macro search order (so a project or package macro named `hudilite` still wins): attribute `x`
of it is the plugin's global macro `hudilite_x`.
"""

from __future__ import annotations

from dbt.context.macros import MacroNamespace


class HudiliteMacros:
    def __init__(self, namespace) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        macro = self._namespace.global_project_namespace.get(f"hudilite_{name}")
        if macro is None:
            raise AttributeError(f"hudilite.{name}: no such hudilite macro (see docs/incremental.md)")
        return macro


def install() -> None:
    if getattr(MacroNamespace, "_hudilite_namespace", False):
        return
    original = MacroNamespace._search_order

    def _search_order(self):
        yield from original(self)
        yield {"hudilite": HudiliteMacros(self)}

    MacroNamespace._search_order = _search_order
    MacroNamespace._hudilite_namespace = True
