"""The Python daemon of a crash child's Spark application (`spark.python.daemon.module`): PySpark's own daemon,
whose forked workers install the crash injector (hudilite/storage/faults.py) from the environment before they
run a task, so the data files and log appends tasks write are numbered with the driver's operations.

Nothing of hudilite (nor pyarrow) is imported here before the fork: PySpark's daemon must not start threads
before it forks its workers."""

import pyspark.daemon as daemon

_worker = daemon.worker


def worker(sock, authenticated):
    from hudilite.storage import faults

    faults.install_from_env()
    return _worker(sock, authenticated)


daemon.worker = worker  # manager() looks it up at each fork

if __name__ == "__main__":
    daemon.manager()
