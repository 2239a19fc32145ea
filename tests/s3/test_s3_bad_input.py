"""The bad-input catalogue (tests/functional/bad_input_catalogue.py) on s3:// tables against the real S3 server:
every case fails with its error and message fragments, and every object of the bucket (key, size, sha256) is
the same before and after. The cases are the catalogue's own, run on a copy of an s3:// template table; the
damage of the damaged-state cases goes through the storage seam, so it lands in the bucket too."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from pyarrow import fs as pafs

from hudilite.storage.base import register_storage
from hudilite.storage.s3 import S3Storage, register
from tests.functional import bad_input_catalogue as catalogue

# setups that make local files or directories (a plain file where the table should be, a Delta or parquet
# directory), and the rebuild's swap intent (the swap is a local-file-system protocol, hudilite/replace.py)
LOCAL_ONLY = {"file_not_dir", "delta_dir", "parquet_dir", "read_plain_dir", "garbled_swap_intent"}
# the storage lock's lease object: every acquisition rewrites it (a failed commit took the lock too); the
# counterpart of the working directory .hoodie/.locks that may appear on a local table
LOCK_OBJECTS = "/.hoodie/.locks/"
CASES = [c for c in catalogue.CASES if c.name not in LOCAL_ONLY]


@pytest.fixture(scope="module")
def s3_default(s3_server):
    """s3:// served process-wide by the test server (the catalogue's writes and reads take no storage options)."""
    register_storage("s3", lambda _scheme: S3Storage(s3_server.storage_options))
    yield
    register()


@pytest.fixture(scope="module")
def bucket(s3_admin, s3_default):
    """One bucket for the module: the templates, and a directory of its own per case."""
    name = f"bad-{uuid.uuid4().hex[:20]}"
    s3_admin.create_dir(name)
    # the catalogue's templates (cow6/mor6: version 6 whatever the default, for the layout-1 JSON commit cases)
    for table, tt, opts in (("cow", "COPY_ON_WRITE", {}), ("mor", "MERGE_ON_READ", {}),
                            ("cow6", "COPY_ON_WRITE", catalogue.V6), ("mor6", "MERGE_ON_READ", catalogue.V6)):
        p = f"s3://{name}/templates/{table}"
        catalogue.write(p, catalogue.rows(list(range(20))), table_type=tt, options=opts)
        catalogue.write(p, catalogue.rows([1, 2, 3, 30], v=2))
    yield name
    s3_admin.delete_dir(name)


def objects(admin, prefix) -> dict[str, tuple[int, str]]:
    """Every object under `prefix` (bucket/dir): key -> (size, sha256), lock objects aside."""
    out = {}
    for info in admin.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and LOCK_OBJECTS not in info.path:
            with admin.open_input_stream(info.path) as f:
                out[info.path[len(prefix) + 1:]] = (info.size, hashlib.sha256(f.read()).hexdigest())
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_leaves_the_bucket_identical(case, s3_admin, bucket):
    workdir = f"{bucket}/{case.name}"  # the case's directory: nothing may change beside the table either
    path = f"s3://{workdir}/tbl"
    if case.table != "none":
        pafs.copy_files(f"{bucket}/templates/{case.table}", f"{workdir}/tbl", source_filesystem=s3_admin,
                        destination_filesystem=s3_admin)
    if case.setup:
        case.setup(path)
    before = objects(s3_admin, workdir)
    if case.rolls_back:  # the failed write's own files go: it rolls itself back
        own = catalogue._PENDING[path].instant_time
        before = {k: v for k, v in before.items() if own not in k}
    try:
        case.act(path)
    except BaseException as e:  # noqa: BLE001 - the type is checked below
        err = e
    else:
        raise AssertionError(f"{case.name}: {case.input}: accepted, expected {case.error.__name__}")
    finally:
        catalogue._PENDING.pop(path, None)
    assert isinstance(err, case.error), f"{case.name}: raised {type(err).__name__}: {err}"
    for frag in case.fragments:
        assert frag in str(err), f"{case.name}: {frag!r} not in the error message {str(err)!r}"
    after = objects(s3_admin, workdir)
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (added or removed or changed), f"objects changed: added={added} removed={removed} changed={changed}"
    if case.table != "none":
        assert before, "the template table was not copied"


def test_most_of_the_catalogue_runs_on_s3():
    assert len(CASES) >= len(catalogue.CASES) - len(LOCAL_ONLY) and len(CASES) >= 60
