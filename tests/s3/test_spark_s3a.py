"""Runs tests/s3/s3a_checks.py (Spark's native s3a:// scan vs the Arrow scan, against the test S3 server) in a
pytest process of its own: a JVM with hadoop-aws on its class path needs spark-submit to start it with the jars,
which cannot happen in a process whose JVM (the suite's session) is already running."""

import os
import subprocess
import sys

CHECKS = os.path.join(os.path.dirname(__file__), "s3a_checks.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_native_s3a_scan_checks_in_their_own_process():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CHECKS],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    tail = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " skipped" not in r.stdout, tail
