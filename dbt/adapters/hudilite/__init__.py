"""dbt adapter `type: hudilite`: dbt models as Apache-Hudi-format tables, written by the hudilite core."""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.hudilite.connections import HudiliteConnectionManager  # noqa: F401
from dbt.adapters.hudilite.credentials import HudiliteCredentials
from dbt.adapters.hudilite.impl import HudiliteAdapter
from dbt.adapters.hudilite.namespace import install as _install_namespace
from dbt.adapters.hudilite.relation import HudiliteRelation  # noqa: F401
from dbt.include import hudilite

_install_namespace()  # `{{ hudilite.changes(...) }}` in model SQL (namespace.py)

Plugin = AdapterPlugin(
    adapter=HudiliteAdapter,  # type: ignore[arg-type]
    credentials=HudiliteCredentials,
    include_path=hudilite.PACKAGE_PATH,
    dependencies=["spark"],
)
