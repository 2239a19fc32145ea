"""The suite's own session shows a caller's Java options reaching the driver JVM beside hudilite's."""

import os

import pytest

from tests.conftest import C1_ONLY


@pytest.mark.skipif(bool(os.environ.get("HUDILITE_TEST_CONNECT")), reason="a classic session's JVM")
def test_a_callers_java_options_reach_the_driver_beside_hudilites(spark):
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert C1_ONLY in args and "-Duser.timezone=UTC" in args, args  # tests/conftest.py's flag and hudilite's
    assert args.index("-Duser.timezone=UTC") < args.index(C1_ONLY)
