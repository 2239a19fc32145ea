"""hoodie.properties of the version-8 and version-9 tables we create, key by key against the ones Apache Hudi
wrote for the tables in ../shared/hudi-tables (the same table type, keys, partition fields, partition style
and ordering field): every key Apache Hudi writes we write too (except those of features hudilite does not
have, listed with the reason), with the same value for every key that describes the table's layout."""

from __future__ import annotations

import glob
import os
import zipfile

import pyarrow as pa
import pytest

import hudilite
from hudilite.config import TableConfig
from tests.conftest import SHARED

# Apache Hudi keys of features hudilite does not write: the metadata table's index definitions and inflight
# metadata partitions (hudilite keeps no metadata table; hoodie.table.metadata.partitions is written, empty),
# the time-based key generator's formats (hudilite's key generators are SIMPLE, COMPLEX and NON_PARTITION)
NOT_OURS = {"hoodie.table.index.defs.path", "hoodie.table.metadata.partitions.inflight"}

# keys whose value is the table's layout: equal to Apache Hudi's for the same table. Not compared:
# hoodie.archivelog.folder, which Apache Hudi 1.1 (these tables) records as `archived` on version 9 and 1.2 as
# `history`, as we do (docs/compatibility.md); the legacy folder is not read on layout 2 either way
LAYOUT = ["hoodie.table.version", "hoodie.table.initial.version", "hoodie.timeline.layout.version",
          "hoodie.timeline.path", "hoodie.timeline.history.path", "hoodie.table.type", "hoodie.table.keygenerator.type",
          "hoodie.table.recordkey.fields", "hoodie.table.partition.fields", "hoodie.table.ordering.fields",
          "hoodie.table.precombine.field", "hoodie.record.merge.mode", "hoodie.record.merge.strategy.id",
          "hoodie.compaction.payload.class", "hoodie.table.format", "hoodie.database.name",
          "hoodie.datasource.write.drop.partition.columns", "hoodie.datasource.write.hive_style_partitioning",
          "hoodie.datasource.write.partitionpath.urlencode", "hoodie.populate.meta.fields"]


def _hudi_tables(shared_dir):
    out = []
    for z in sorted(glob.glob(os.path.join(shared_dir, "hudi-tables", "**", "*.zip"), recursive=True)):
        with zipfile.ZipFile(z) as f:
            for n in f.namelist():
                if n.endswith(".hoodie/hoodie.properties") and "/metadata/" not in n:
                    props = TableConfig.parse(f.read(n).decode()).props
                    if props.get("hoodie.table.version") in ("8", "9"):
                        out.append((os.path.relpath(z, shared_dir), props))
    return out


CASES = [c for c in _hudi_tables(SHARED)
         if c[1].get("hoodie.table.base.file.format", "PARQUET") == "PARQUET"  # not Lance tables
         and c[1].get("hoodie.table.keygenerator.type") in ("SIMPLE", "COMPLEX", "NON_PARTITION")
         # hudilite reads tables without meta fields but always writes them
         and c[1].get("hoodie.populate.meta.fields", "true") == "true"]


def test_there_are_hudi_written_v8_and_v9_tables_to_compare():
    assert {p["hoodie.table.version"] for _, p in CASES} == {"8", "9"}
    assert {p["hoodie.table.type"] for _, p in CASES} == {"COPY_ON_WRITE", "MERGE_ON_READ"}


@pytest.mark.parametrize("name, theirs", CASES, ids=[c[0] for c in CASES])
def test_properties_key_by_key(tmp_path, name, theirs):
    version = int(theirs["hoodie.table.version"])
    keys = theirs["hoodie.table.recordkey.fields"].split(",")
    parts = [p for p in theirs.get("hoodie.table.partition.fields", "").split(",") if p]
    ordering = theirs.get("hoodie.table.ordering.fields") or theirs.get("hoodie.table.precombine.field")
    cols = {c: pa.array(["a", "b"]) for c in keys + parts}
    if ordering:
        cols[ordering] = pa.array([1, 2], pa.int64())
    options = {"hoodie.write.table.version": str(version),
               "hoodie.datasource.write.hive_style_partitioning":
                   theirs.get("hoodie.datasource.write.hive_style_partitioning", "true")}
    path = str(tmp_path / "t")
    hudilite.write(pa.table(cols), path, record_key=keys, precombine_field=ordering or hudilite.UNSET,
                   partition_by=parts, table_type=theirs["hoodie.table.type"], options=options)
    ours = TableConfig.parse(open(os.path.join(path, ".hoodie", "hoodie.properties")).read()).props

    missing = sorted(set(theirs) - set(ours) - NOT_OURS)
    assert not missing, f"{name}: Apache Hudi writes {missing}, we do not"
    differ = {k: (theirs.get(k), ours.get(k)) for k in LAYOUT
              if k in theirs and k in ours and theirs[k] != ours[k]
              and not (k == "hoodie.table.recordkey.fields" and theirs[k].split(",") == ours[k].split(","))}
    assert not differ, f"{name}: (Apache Hudi, ours) differ: {differ}"
    # the version's own keys: 9 names ordering fields, 8 a precombine field, as Apache Hudi does
    if ordering:
        assert ("hoodie.table.ordering.fields" in ours) == (version == 9)
        assert ("hoodie.table.precombine.field" in ours) == (version == 8)
