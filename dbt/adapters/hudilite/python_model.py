"""Python models (`def model(dbt, session)`) run in the dbt process, on the adapter's own SparkSession.

dbt-spark submits a model's script to Databricks' job APIs; hudilite has no cluster to submit to, so (as
dbt-duckdb does for its local environment) the compiled script is executed here. The script is dbt's compiled
code (the user's `model` plus dbt's `dbtObj`, `ref`, `source`, `config`, `this`) followed by the
materialization's tail (macros/utils/hudilite_py_script.sql), which hands `model` to the adapter's write: the
model's frame is computed inside the same locked write path as a SQL model's rows, so nothing is written when
user code fails.
"""

from __future__ import annotations

import linecache
import traceback
from typing import Any, Callable, Dict

from dbt_common.exceptions import DbtRuntimeError

RESPONSE_NAME = "dbt_hudilite_response"  # the script's tail assigns the adapter response to this name


def script_filename(unique_id: str) -> str:
    return f"<dbt python model {unique_id}>"


def run_script(code: str, unique_id: str, names: Dict[str, Any]) -> Any:
    """Execute the compiled script with `names` as its globals (spark/session, the loader, the writer); return
    the adapter response the script's tail stored. Errors in the script's own top level (an import of a
    missing package, a syntax error) fail the model naming it; errors in `model()` surface from the write."""
    filename = script_filename(unique_id)
    # registered so tracebacks show the model's source lines, not only line numbers
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        compiled = compile(code, filename, "exec")
    except SyntaxError as e:
        raise DbtRuntimeError(f"Python model {unique_id} does not compile: {e}") from None
    namespace: Dict[str, Any] = {"__name__": f"dbt_python_model_{unique_id.replace('.', '_')}", **names}
    try:
        exec(compiled, namespace)  # noqa: S102 - running the user's model is the point
    except DbtRuntimeError:
        raise
    except Exception as e:  # noqa: BLE001 - user code: reported with its traceback
        raise DbtRuntimeError(f"Python model {unique_id} failed, nothing was written:\n{user_traceback(e)}") from None
    if RESPONSE_NAME not in namespace:
        raise DbtRuntimeError(f"Python model {unique_id}: the script did not reach the hudilite write "
                              "(its materialization tail is missing)")
    return namespace[RESPONSE_NAME]


def user_traceback(e: BaseException) -> str:
    """The exception's traceback from the first frame of the model's script on (the adapter's frames above it
    say nothing about the user's error)."""
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<dbt python model "):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb if tb is not None else e.__traceback__)).rstrip()


def call_model(produce: Callable[[], Any], model_name: str) -> Any:
    """Call the script's `lambda: model(dbt, session)`; a failure in user code fails the model with its
    traceback, before anything is written."""
    try:
        return produce()
    except DbtRuntimeError:
        raise
    except Exception as e:  # noqa: BLE001 - user code
        raise DbtRuntimeError(f"Python model {model_name} failed, nothing was written:\n{user_traceback(e)}") from None


def to_spark_frame(result: Any, spark, model_name: str):
    """A Spark DataFrame of the model's result: a Spark DataFrame (classic or Connect) as it is; a pandas-on-Spark
    frame through `to_spark()`; a pandas DataFrame or a pyarrow Table through `createDataFrame` (Spark 4
    takes both)."""
    # by module name: pandas and pyspark.pandas are imported only if the model itself did
    from_module = type(result).__module__
    package = from_module.split(".")[0]
    if from_module.startswith("pyspark.sql") and hasattr(result, "schema") and hasattr(result, "columns"):
        return result
    if from_module.startswith("pyspark.pandas") and hasattr(result, "to_spark"):
        return result.to_spark()
    if package in ("pandas", "pyarrow"):
        if package == "pyarrow" and type(result).__name__ != "Table":
            raise DbtRuntimeError(f"Python model {model_name} returned a pyarrow {type(result).__name__}; return a "
                                  "pyarrow Table, a pandas or a Spark DataFrame")
        if package == "pandas" and type(result).__name__ != "DataFrame":
            raise DbtRuntimeError(f"Python model {model_name} returned a pandas {type(result).__name__}; return a "
                                  "pandas DataFrame, a pyarrow Table or a Spark DataFrame")
        return spark.createDataFrame(result)
    raise DbtRuntimeError(f"Python model {model_name} returned {type(result).__module__}.{type(result).__name__}; "
                          "a model must return a Spark DataFrame, a pandas DataFrame or a pyarrow Table")
