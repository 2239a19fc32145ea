"""A caller's Java options reach the driver JVM after hudilite's own (which they used to replace)."""

import os
import subprocess
import sys

import pytest

from tests.conftest import C1_ONLY

# a process of its own: the suite's session may have been started by another test, without the caller's flag
SCRIPT = """
import sys
from hudilite.spark.session import DRIVER_JAVA_OPTIONS, local_session
spark = local_session("local[1]", app_name="java-options", conf={DRIVER_JAVA_OPTIONS: sys.argv[1]})
jvm = spark.sparkContext._jvm
print("\\n".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
"""


@pytest.mark.slow
def test_a_callers_java_options_reach_the_driver_beside_hudilites():
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", SCRIPT, C1_ONLY], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    args = out.stdout.splitlines()
    assert C1_ONLY in args and "-Duser.timezone=UTC" in args, args  # the caller's flag and hudilite's
    assert args.index("-Duser.timezone=UTC") < args.index(C1_ONLY)
