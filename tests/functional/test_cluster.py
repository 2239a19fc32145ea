"""The write path unchanged on a Spark standalone cluster: master + two workers on loopback, executors in
separate JVMs and Python workers in separate processes."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(home, "bin", "spark-class")
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    logs = tmp_path_factory.mktemp("cluster-logs")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())],
                              env=env, stdout=open(logs / "master.log", "w"), stderr=subprocess.STDOUT)]
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("standalone master did not start: " + (logs / "master.log").read_text()[-2000:])
        for i in range(2):
            wdir = tmp_path_factory.mktemp(f"worker{i}")
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", "1", "--memory", "1g",
                 "--host", "127.0.0.1", "--webui-port", str(_free_port()), "--work-dir", str(wdir), url],
                env=env, stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))
        # wait for both workers to register instead of a fixed pause: the job then gets its executors at once
        deadline = time.time() + 120
        while (logs / "master.log").read_text().count("Registering worker") < 2:
            if time.time() > deadline:
                pytest.fail("the workers did not register: " + (logs / "master.log").read_text()[-2000:])
            time.sleep(0.2)
        yield url, logs
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_write_and_read_on_standalone_cluster(standalone, tmp_path):
    url, logs = standalone
    path = str(tmp_path / "tbl")
    job = os.path.join(os.path.dirname(__file__), "cluster_job.py")
    r = subprocess.run([sys.executable, job, url, path], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["executors"] == 2
    assert out["driver_pid"] not in out["worker_pids"]
    assert out["count"] == 201
    assert out["updated"] == 20 and out["inserted"] == 1
    assert out["names"] == {"0": "u0", "10": "u10", "1": "m1", "21": "m21", "500": "new"}
    assert out["c3_updated"] == 10
    assert out["incremental"] == 21
    assert out["file_units"] > 0 and out["from_files_ok"]
    # the table is an ordinary Hudi table for any reader
    import hudi

    t = hudi.HudiTableBuilder.from_base_uri(path).build()
    assert sum(b.num_rows for b in t.read()) == 201
