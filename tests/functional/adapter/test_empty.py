"""dbt-tests-adapter `empty` (`dbt run --empty`) against `type: hudilite`. (`BaseTestEmptySeedFlag` exercises
`seed --empty`, a dbt-core 1.12 feature: not applicable to dbt-core 1.11.)"""

from dbt.tests.adapter.empty.test_empty import BaseTestEmpty, BaseTestEmptyInlineSourceRef


class TestEmptyHudilite(BaseTestEmpty):
    pass


class TestEmptyInlineSourceRefHudilite(BaseTestEmptyInlineSourceRef):
    pass
