"""`dbt --version` lists the hudilite plugin: dbt-core 1.11 finds plugins as files
<dbt.adapters search location>/<name>/__version__.py and imports `dbt.adapters.<name>.__version__`."""

from dbt.version import _get_dbt_plugins_info

from dbt.adapters.hudilite.__version__ import version


def test_dbt_version_lists_hudilite():
    assert ("hudilite", version) in list(_get_dbt_plugins_info())
