"""Partition values with characters a path cannot hold as they are, in tables Apache Hudi wrote:
- `hoodie.datasource.write.partitionpath.urlencode=true`: Hudi writes '/', ':', '%' ... of a value as %XX;
  hudilite's partition pruning compares a filter with the decoded value (it compared the escaped directory
  name, so a filter on such a value pruned its partition away and returned no rows);
- urlencode off (Hudi's default): a value holding '/' becomes nested directories (Hudi's quickstart partitions
  by 'americas/brazil/sao_paulo'); no directory level is a field's value, so nothing is pruned by path (the
  first level was taken as the whole value, and the filter pruned the partition away).
Writing into a URL-encoded table, hudilite refuses a value Hudi would escape, naming it, and leaves the table
as it was; other values are written, and Apache Hudi reads them."""

from __future__ import annotations

import os

import pytest

import hudilite
from hudilite import Table
from hudilite.errors import InvalidWriteError
from tests.judge.test_apache_hudi_reads import hudi_opts

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

DDL = "id long, ts long, name string, region string"
ROWS = [(1, "2024/01/01"), (2, "2024/01/01"), (3, "10:30 100%"), (4, "plain"), (5, "a=b")]


def _rows(rows, ts=1):
    return [{"id": i, "ts": ts, "name": f"n{i}", "region": r} for i, r in rows]


def _files(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


@pytest.mark.parametrize("hive", [False, True], ids=["plain", "hive_style"])
@pytest.mark.parametrize("encode", [True, False], ids=["urlencode", "as_is"])
def test_filters_on_values_hudi_escapes_or_nests(spark, hudi_judge, tmp_path, encode, hive):
    path = str(tmp_path / "t")
    # urlencode off: Apache Hudi itself fails on a value with ':' (it reads the value as a URI scheme)
    rows = ROWS if encode else [r for r in ROWS if ":" not in r[1]]
    hudi_judge.write(path, DDL, _rows(rows), **hudi_opts(
        "COPY_ON_WRITE", "insert", **{"hoodie.datasource.write.partitionpath.urlencode": str(encode).lower(),
                                      "hoodie.datasource.write.hive_style_partitioning": str(hive).lower()}))
    dirs = {p for p in (os.path.dirname(f) for f in _files(path)) if not p.startswith(".hoodie")}
    assert any("%2F" in d for d in dirs) == encode and any(d.count("/") >= 2 for d in dirs) != encode, dirs

    for value in {r for _, r in rows}:
        want = sorted(i for i, r in rows if r == value)
        got = sorted(r.id for r in hudilite.read(spark, path, filters=[("region", "=", value)])
                     .where(f"region = '{value}'").select("id").collect())
        assert got == want, f"region = {value!r}"
        got_in = sorted(r.id for r in hudilite.read(spark, path, filters=[("region", "in", [value, "zz"])])
                        .where(f"region = '{value}'").select("id").collect())
        assert got_in == want, f"region in ({value!r}, 'zz')"
    hudilite.register(spark)
    src = spark.read.format("hudilite").load(path).where("region = '2024/01/01'")
    assert sorted(r.id for r in src.select("id").collect()) == [1, 2]


def test_a_url_encoded_table_refuses_values_hudi_would_escape(spark, hudi_judge, tmp_path):
    path = str(tmp_path / "t")
    hudi_judge.write(path, DDL, _rows(ROWS[:4]), **hudi_opts(
        "COPY_ON_WRITE", "insert", **{"hoodie.datasource.write.partitionpath.urlencode": "true"}))
    before = (_files(path), [i.timestamp for i in Table(path).timeline.completed()])
    for value, error in (("2024#01", r"'2024#01' holds '#'.*urlencode=true"),
                         ("2024/01/01", r"'2024/01/01': partition values may not contain '/'")):
        bad = spark.createDataFrame([(1, 2, "x", value), (9, 2, "y", "ok")], DDL)
        for data in (bad, bad.toArrow()):  # through Spark and through the driver-local writer
            with pytest.raises(InvalidWriteError, match=error):
                hudilite.write(data, path, record_key="id", precombine_field="ts", partition_by="region")
            assert (_files(path), [i.timestamp for i in Table(path).timeline.completed()]) == before
    with pytest.raises(InvalidWriteError, match=r"'10:30' holds ':'"):
        hudilite.write(spark.createDataFrame([(7, 2, "z", "10:30")], DDL), path, record_key="id",
                       precombine_field="ts", partition_by="region", operation="bulk_insert")
    assert [i.timestamp for i in Table(path).timeline.completed()] == before[1]

    # values without such characters are written where Hudi writes them, and Hudi reads them
    hudilite.write(spark.createDataFrame([(4, 2, "new", "plain"), (8, 2, "e", "east")], DDL), path,
                   record_key="id", precombine_field="ts", partition_by="region")
    theirs = sorted((r["id"], r["name"], r["region"]) for r in hudi_judge.read(path))
    assert theirs == [(1, "n1", "2024/01/01"), (2, "n2", "2024/01/01"), (3, "n3", "10:30 100%"), (4, "new", "plain"),
                      (8, "e", "east")]
