"""Crash at every storage operation (bench/crashpoints.py): a process killed before (or half-way through) any
numbered storage operation of an operation under test leaves the before- or the after-snapshot (hudilite and
hudi-rs agree), the next write recovers and commits with every committed row exactly once, and after the next
clean nothing of the killed run is left.

By default a deterministic sample of crash points spread over every scenario (CI); every crash point with
`HUDILITE_CRASHPOINTS=all` (or `python -m bench.crashpoints`, the same run with a per-scenario table)."""

import os

import pytest

from bench import crashpoints

SAMPLE = int(os.environ.get("HUDILITE_CRASHPOINTS_SAMPLE", 104))
SEED = int(os.environ.get("HUDILITE_CRASHPOINTS_SEED", 24))


@pytest.mark.crashpoints
@pytest.mark.slow
def test_crash_points(tmp_path):
    everything = os.environ.get("HUDILITE_CRASHPOINTS", "").lower() == "all"
    names = list(crashpoints.SCENARIOS)
    res = crashpoints.run(names, sample=None if everything else SAMPLE, seed=SEED, root=str(tmp_path),
                          log=lambda *a: None)
    assert set(res["points"]) == set(names), "every scenario has crash points in the run"
    assert sum(res["points"].values()) >= (1000 if everything else 100)
    assert not res["failures"], "\n\n".join(f"{n} crash at {c}: {e}" for n, c, e in res["failures"])


def test_injector_numbers_every_mutating_operation_and_costs_nothing_uninstalled(tmp_path):
    from hudilite.storage import faults, storage_for

    fs = storage_for(str(tmp_path))
    assert type(fs).fault is None
    inj = faults.install(faults.CrashInjector())
    try:
        p = str(tmp_path / "a")
        fs.write_bytes(p, b"x")
        fs.put_if_absent(p + "2", b"y")
        fs.append_bytes(p + "3", [b"z"])
        fs.rename(p, p + "4")
        fs.delete(p + "4")
    finally:
        faults.install(None)
    assert [o for o, _p, _t in inj.ops] == ["write", "put_if_absent", "append", "rename", "delete"]
    assert faults.install_from_env({}) is None and type(fs).fault is None
