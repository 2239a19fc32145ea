"""dbt-tests-adapter `utils.data_types` classes against `type: hudilite` (as dbt-spark runs them).

The `expected` seeds are hudilite tables whose column types come from dbt-spark's CSV type inference: whole
numbers are `bigint` (convert_integer_type) and decimals `double` (convert_number_type). Where the macro
under test yields a narrower Spark type (`type_int()` = int, `type_float()` = float), the seed declares that
type with `column_types` — otherwise `1.2345` as double vs float differ in value and `int` vs `bigint` in type.
"""

import pytest
from dbt.tests.adapter.utils.data_types.test_type_bigint import BaseTypeBigInt
from dbt.tests.adapter.utils.data_types.test_type_float import BaseTypeFloat
from dbt.tests.adapter.utils.data_types.test_type_int import BaseTypeInt
from dbt.tests.adapter.utils.data_types.test_type_numeric import BaseTypeNumeric
from dbt.tests.adapter.utils.data_types.test_type_string import BaseTypeString
from dbt.tests.adapter.utils.data_types.test_type_timestamp import BaseTypeTimestamp


class TestTypeBigInt(BaseTypeBigInt):
    pass


class TestTypeFloat(BaseTypeFloat):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"test": {"expected": {"+column_types": {"float_col": "float"}}}}}


class TestTypeInt(BaseTypeInt):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"seeds": {"test": {"expected": {"+column_types": {"int_col": "int"}}}}}


class TestTypeNumeric(BaseTypeNumeric):
    pass


class TestTypeString(BaseTypeString):
    pass


class TestTypeTimestamp(BaseTypeTimestamp):
    pass
