"""The Python model runner's pure parts (dbt/adapters/hudilite/python_model.py), without Spark: the script is
executed with the names the adapter gives it, errors name the model and keep the user's traceback."""

import pyarrow as pa
import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.hudilite.python_model import RESPONSE_NAME, call_model, run_script, to_spark_frame

SCRIPT = """
def model(dbt, session):
    return session + 1

dbt_hudilite_response = hudilite_write_model(lambda: model(None, session))
"""


def test_script_hands_its_model_to_the_writer():
    def write(produce):
        return ("response", produce())

    assert RESPONSE_NAME == "dbt_hudilite_response"
    assert run_script(SCRIPT, "model.p.m", {"session": 41, "hudilite_write_model": write}) == ("response", 42)


def test_user_error_fails_with_the_models_traceback():
    script = SCRIPT.replace("return session + 1", "raise ValueError('bad row')")

    def write(produce):
        return call_model(produce, "s.m")

    with pytest.raises(DbtRuntimeError) as e:
        run_script(script, "model.p.m", {"session": 1, "hudilite_write_model": write})
    text = str(e.value)
    assert "Python model s.m failed, nothing was written" in text
    assert 'File "<dbt python model model.p.m>", line 3, in model' in text
    assert "raise ValueError('bad row')" in text  # the source line, from linecache
    assert "ValueError: bad row" in text
    assert "python_model.py" not in text  # the adapter's own frames are cut


def test_top_level_errors_and_a_missing_tail():
    with pytest.raises(DbtRuntimeError, match="does not compile"):
        run_script("def model(:\n", "model.p.bad", {})
    with pytest.raises(DbtRuntimeError, match="ModuleNotFoundError: No module named 'no_such_module_x'"):
        run_script("import no_such_module_x\n", "model.p.imp", {})
    with pytest.raises(DbtRuntimeError, match="did not reach the hudilite write"):
        run_script("def model(dbt, session):\n    return None\n", "model.p.tail", {})


def test_unsupported_results_are_named():
    with pytest.raises(DbtRuntimeError, match="returned builtins.list"):
        to_spark_frame([1, 2], None, "s.m")
    batch = pa.record_batch({"id": [1]})
    with pytest.raises(DbtRuntimeError, match="returned a pyarrow RecordBatch; return a pyarrow Table"):
        to_spark_frame(batch, None, "s.m")
