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


# ---- regressions: bugs the crash points found (each names its crash point by what the operation does there) ----
@pytest.mark.slow
def test_archival_killed_after_deleting_instant_files_leaves_no_change_images(tmp_path):
    """archive() deleted the archived instants' files before their change images: killed in between, the
    images stayed forever (nothing removes images of an instant no longer on the active timeline)."""
    deletes = []

    def third_instant(op, p):
        """Before deleting the third archived instant's first file: the second (an upsert, which wrote change
        images; the first is the table's insert, which wrote none) is off the active timeline then."""
        if op != "delete" or os.path.basename(os.path.dirname(p)) != ".hoodie":
            return False
        deletes.append(p)
        return len(deletes) == 7  # requested, inflight, completed of each instant

    crash, err = crashpoints.run_point("archival", str(tmp_path), third_instant)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_last_completion_time_temp_file_is_removed(tmp_path):
    """A writer killed while writing `.hoodie/.aux/last_completion_time` (temp file written, not renamed) left
    the temp file forever; the next completion removes it."""
    crash, err = crashpoints.run_point(
        "compaction", str(tmp_path), lambda op, p: op == "write" and p.endswith("last_completion_time"), torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_lock_release_killed_after_its_rename_leaves_no_grave(tmp_path):
    crash, err = crashpoints.run_point("cow_upsert", str(tmp_path), lambda op, p: op == "delete" and ".release." in p)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_partition_metadata_of_a_new_partition_is_removed_by_rollback(tmp_path):
    """A write killed while writing a new partition's `.hoodie_partition_metadata` (temp file written, not
    linked) left the temp file, and so the partition directory, after its rollback."""
    crash, err = crashpoints.run_point(
        "cow_insert_new_table", str(tmp_path),
        lambda op, p: op == "put_if_absent" and p.endswith(".hoodie_partition_metadata"), torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_service_claim_temp_file_is_removed_by_the_next_claim(tmp_path):
    """An executor killed while writing its claim record on a clustering plan (temp file written, not renamed)
    left the temp file in `.hoodie/.aux/service_claims` forever; the next claim of the plan removes it."""
    crash, err = crashpoints.run_point(
        "clustering", str(tmp_path), lambda op, p: op == "write" and "service_claims" in p, torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_table_properties_of_a_new_table_are_removed_by_the_next_creator(tmp_path):
    """The first write killed while writing `hoodie.properties` (temp file written, not linked) left the temp
    file in `.hoodie` forever; the write that creates the table next removes it."""
    crash, err = crashpoints.run_point(
        "cow_insert_new_table", str(tmp_path), lambda op, p: op == "put_if_absent" and p.endswith("hoodie.properties"),
        torn=True)
    assert err is None, f"crash at {crash}: {err}"


@pytest.mark.slow
def test_torn_service_plan_temp_file_is_removed_by_the_next_write(tmp_path):
    """A clean scheduler killed while writing its plan (`<instant>.clean.requested`: temp file written, not
    linked) left the temp file in `.hoodie` forever: the instant never reached the timeline, and only temp files
    of completed or rolled-back instants were removed. Same for compaction and clustering plans."""
    crash, err = crashpoints.run_point(
        "clean", str(tmp_path), lambda op, p: op == "put_if_absent" and p.endswith(".clean.requested"), torn=True)
    assert err is None, f"crash at {crash}: {err}"
