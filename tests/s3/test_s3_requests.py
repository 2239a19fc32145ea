"""Request economy on s3:// (real S3 server): a snapshot read and a compaction plan from one listing of the
table, not a LIST per partition, and an upsert costs what its touched partitions and file groups cost, however
many other partitions the table has (bench/s3_requests.py prints the same numbers for 30 partitions)."""

import os
from types import SimpleNamespace

import pytest

from bench.s3_requests import measure
from hudilite.fs_view import list_partitions, partitions_in_listing
from hudilite.storage import storage_for
from hudilite.storage.base import register_storage
from hudilite.storage.s3 import S3Storage, register


@pytest.fixture
def s3_base(s3_server, s3_bucket):
    register_storage("s3", lambda _scheme: S3Storage(s3_server.storage_options))
    yield f"s3://{s3_bucket}"
    register()


def test_requests_do_not_grow_with_untouched_partitions(s3_base):
    few = measure(f"{s3_base}/few", partitions=3, n_rows=90, touched=3, table_type="MERGE_ON_READ")
    many = measure(f"{s3_base}/many", partitions=30, n_rows=900, touched=3, table_type="MERGE_ON_READ")
    for op in ("snapshot read", "compaction", "upsert"):
        assert many[op].get("LIST", 0) == few[op].get("LIST", 0), (op, few[op], many[op])
    # the upsert reads, merges and writes 3 file groups in both tables; the marker service may cut its PUTs
    # into one batch or a few
    assert sum(many["upsert"].values()) <= sum(few["upsert"].values()) + 2, (few["upsert"], many["upsert"])
    assert sum(many["compaction"].values()) <= sum(few["compaction"].values()) + 2
    # the read fetches each of the 30 base files (a footer, the columns): nothing per partition besides
    assert many["snapshot read"]["LIST"] <= 6 and many["snapshot read"].get("GET", 0) <= 30 * 2 + 4

    # the partitions from the one listing are those the per-directory walk finds
    base = f"{s3_base}/many"
    assert partitions_in_listing(storage_for(base).list_tree(base), True) == list_partitions(base, True)


def _e(name):
    return SimpleNamespace(name=name)


def test_partitions_in_listing_matches_the_walk_rules():
    listing = {
        "": [_e("x.txt")],
        ".hoodie": [_e("hoodie.properties")], ".hoodie/.temp/001": [_e("MARKERS0")],
        "a=1/b=2": [_e(".hoodie_partition_metadata"), _e("f.parquet")],
        "a=1/b=3": [_e(".f.log.1_0-0-0")],  # only hidden files: still a leaf partition
        "a=1": [_e("stray.parquet")],  # files beside subdirectories: a partition too
        "a=2": [_e(".hidden")],  # a parent with only hidden files is no partition
        "a=2/b=1": [_e("g.parquet")],
        "a=3/.tmp": [_e("x")],  # hidden directories without a partition metafile are skipped
        ".ipynb_checkpoints": [_e("n.parquet")],
        # a partition value starting with '.' ("a=.y" hive-style is not hidden): a hidden directory with a metafile
        ".y": [_e(".hoodie_partition_metadata"), _e("h.parquet")],
        ".z/b=1": [_e(".hoodie_partition_metadata.parquet"), _e("i.parquet")],
        "_delta_log": [_e("0.json")],
    }
    expected = [".y", ".z/b=1", "a=1", "a=1/b=2", "a=1/b=3", "a=2/b=1"]
    assert partitions_in_listing(listing, True) == expected
    assert partitions_in_listing(listing, False) == [""]


def test_the_walk_finds_the_partitions_the_listing_rules_find(tmp_path):
    """`list_partitions` (local directories, one listing each) keeps the same rules as `partitions_in_listing`."""
    for d, names in {"": ["x.txt"], ".hoodie": ["hoodie.properties"], "a=1/b=2": [".hoodie_partition_metadata"],
                     "a=1/b=3": [".f.log.1_0-0-0"], "a=1": ["stray.parquet"], "a=2": [".hidden"],
                     "a=2/b=1": ["g.parquet"], "a=1/b=2/.tmp": ["x"], ".ipynb_checkpoints": ["n.parquet"],
                     ".y": [".hoodie_partition_metadata", "h.parquet"], ".z/b=1": [".hoodie_partition_metadata"],
                     "_delta_log": ["0.json"]}.items():
        os.makedirs(tmp_path / d, exist_ok=True)
        for n in names:
            (tmp_path / d / n).write_bytes(b"")
    assert list_partitions(str(tmp_path), True) == [".y", ".z/b=1", "a=1", "a=1/b=2", "a=1/b=3", "a=2/b=1"]
