"""The option registry (hudilite/options.py): one declaration per key, the typed accessor, the one boolean
parser, unknown-key suggestions, the generated docs page, and no key read around the declarations."""

import os
import re
import types

import pytest

from hudilite import options as o
from hudilite.errors import InvalidWriteError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_each_key_is_declared_once_per_registry():
    for group in (o.OPTIONS, o.SPARK_CONF, o.TABLE_PROPERTIES):
        keys = [opt.key for opt in group]
        assert len(keys) == len(set(keys))
    assert {opt.scope for opt in o.DECLARED} <= set(o.SCOPES)
    # a key in two registries means two things: what a write asks for, what the table records
    both = {opt.key for opt in o.OPTIONS} & {opt.key for opt in o.TABLE_PROPERTIES}
    assert both == {"hoodie.table.name", "hoodie.table.precombine.field",
                    "hoodie.datasource.write.hive_style_partitioning"}
    assert all(opt.key.startswith("spark.hudilite.") for opt in o.SPARK_CONF)


@pytest.mark.parametrize("value,want", [("true", True), ("TRUE", True), (" 1 ", True), ("yes", True), (True, True),
                                        ("false", False), ("0", False), ("No", False), (False, False)])
def test_parse_bool(value, want):
    assert o.parse_bool(value, "k") is want


def test_parse_bool_default_and_errors():
    assert o.parse_bool(None, "k", True) is True and o.parse_bool("", "k", False) is False
    with pytest.raises(InvalidWriteError, match=r"option k='maybe': expected true or false"):
        o.parse_bool("maybe", "k", True)
    with pytest.raises(InvalidWriteError, match="expected true or false"):
        o.parse_bool("", "k")  # no default: an empty value is not a boolean


def test_typed_get_defaults_and_values():
    assert o.MAX_FILE_SIZE.get(None) == 120 * 1024 * 1024
    assert o.MAX_FILE_SIZE.get({o.MAX_FILE_SIZE.key: " 42 "}) == 42
    assert o.MAX_FILE_SIZE.get({o.MAX_FILE_SIZE.key: ""}) == 120 * 1024 * 1024  # empty: the default
    assert o.COMPACT_PARALLELISM.get({}) is None and o.COMPACT_PARALLELISM.get({}, 7) == 7
    assert o.CLEANER_POLICY.get({o.CLEANER_POLICY.key: "keep_latest_file_versions"}) == "KEEP_LATEST_FILE_VERSIONS"
    assert o.LOG_BLOCK_FORMAT.get({o.LOG_BLOCK_FORMAT.key: "AVRO"}) == "avro"
    assert o.CLUSTER_SORT_COLUMNS.get({o.CLUSTER_SORT_COLUMNS.key: "a, b,"}) == ["a", "b"]
    assert o.CLUSTER_SORT_COLUMNS.get({o.CLUSTER_SORT_COLUMNS.key: ("a", "b")}) == ["a", "b"]
    cols = o.CLUSTER_SORT_COLUMNS.get({})
    cols.append("x")  # the caller's own list: the declared default is not shared
    assert o.CLUSTER_SORT_COLUMNS.get({}) == []
    assert o.LOCK_EXPIRE_MINUTES.get({o.LOCK_EXPIRE_MINUTES.key: "0.5"}) == 0.5
    assert o.FSYNC.get({o.FSYNC.key: "no"}) is False and o.FSYNC.get({}) is True


@pytest.mark.parametrize("opt,value,message", [
    (o.MAX_FILE_SIZE, "big", "expected an integer"),
    (o.LOCK_WAIT_MS, "-5", "expected a non-negative integer"),
    (o.CLEANER_COMMITS_RETAINED, "0", "expected a positive integer"),
    (o.LOCK_EXPIRE_MINUTES, "soon", "expected a number"),
    (o.INDEX_TYPE, "HBASE", "expected one of BLOOM, SIMPLE, GLOBAL_BLOOM, GLOBAL_SIMPLE"),
    (o.CLEAN_AUTOMATIC, "sometimes", "expected true or false"),
])
def test_bad_values_name_the_key(opt, value, message):
    with pytest.raises(InvalidWriteError, match=re.escape(f"option {opt.key}={value!r}: {message}")):
        opt.get({opt.key: value})
    with pytest.raises(InvalidWriteError, match=re.escape(message)):
        o.check_options({opt.key: value})


def test_table_properties_read_as_java_reads_them():
    """hoodie.properties written by another engine never fails a read: only "true" is true, "" is a value."""
    assert o.T_HIVE_STYLE.get({o.T_HIVE_STYLE.key: "yes"}) is False
    assert o.T_META_FIELDS.get({o.T_META_FIELDS.key: ""}) is False
    assert o.T_META_FIELDS.get({}) is True
    assert o.T_TIMELINE_PATH.get({o.T_TIMELINE_PATH.key: ""}) == ""
    assert o.T_RECORD_KEYS.get({o.T_RECORD_KEYS.key: "a,b"}) == ["a", "b"]


@pytest.mark.parametrize("key,hint", [
    ("hoodie.cleaner.commits.retaind", "did you mean hoodie.cleaner.commits.retained?"),
    ("hudilite.write.allow.existing.file", "did you mean hudilite.write.allow.existing.files?"),
    ("foo.bar", "hudilite reads only the hoodie.* keys listed in docs/options.md"),
    ("hoodie.table.type", ""),  # a table property, not a write option (refused as before)
    ("spark.hudilite.read.smallSliceBytes", "hudilite reads only"),  # Spark conf, not a write option
])
def test_unknown_write_options(key, hint):
    with pytest.raises(InvalidWriteError, match=re.escape(f"unknown option {key!r}") + ".*" + re.escape(hint)):
        o.check_options({key: "1"})


def test_read_options():
    o.check_read_options({"path": "/x", "as_of": "1", "hoodie.datasource.read.begin.instanttime": "1",
                          o.READ_PARTITION_BYTES.key: "1024", o.QUERY_TYPE.key: "SNAPSHOT"})
    with pytest.raises(InvalidWriteError, match="unknown data source option 'hudilite.read.partition.byte'; "
                                                "did you mean hudilite.read.partition.bytes"):
        o.check_read_options({"hudilite.read.partition.byte": "1"})
    with pytest.raises(InvalidWriteError, match="hudilite.read.partition.bytes='0': expected a positive integer"):
        o.check_read_options({o.READ_PARTITION_BYTES.key: "0"})
    with pytest.raises(InvalidWriteError, match="hoodie.datasource.query.type='latest'"):
        o.check_read_options({o.QUERY_TYPE.key: "latest"})


class _Conf:
    """RuntimeConfig as Spark Connect has it (no _jconf): getAll and get."""

    def __init__(self, values):
        self.values = values

    @property
    def getAll(self):
        return dict(self.values)

    def get(self, key, default=None):
        return self.values.get(key, default)


class _JConf:
    """Classic PySpark's py4j RuntimeConfig: the key set comes back as Java's toString of a set."""

    def __init__(self, values):
        self.values = values

    def getAllAsJava(self):
        keys = types.SimpleNamespace(toString=lambda: "[" + ", ".join(self.values) + "]")
        return types.SimpleNamespace(keySet=lambda: keys)


def _spark(values, classic):
    conf = _Conf(values)
    if classic:
        conf._jconf = _JConf(values)
    return types.SimpleNamespace(conf=conf)


@pytest.mark.parametrize("classic", [True, False])
def test_spark_conf(classic):
    assert o.spark_conf(None) == {}
    spark = _spark({"spark.app.name": "x", o.SMALL_SLICE_BYTES.key: "0", o.OVERLAY_CACHE.key: "false"}, classic)
    conf = o.spark_conf(spark)
    assert conf == {o.SMALL_SLICE_BYTES.key: "0", o.OVERLAY_CACHE.key: "false"}
    assert o.SMALL_SLICE_BYTES.get(conf) == 0 and o.OVERLAY_CACHE.get(conf) is False
    assert o.OVERLAY_MIN_LOG_BYTES.get(conf) == 1 << 20
    with pytest.raises(InvalidWriteError, match="unknown Spark conf 'spark.hudilite.read.overlaycache'; did you "
                                                "mean spark.hudilite.read.overlayCache"):
        o.spark_conf(_spark({"spark.hudilite.read.overlaycache": "false"}, classic))
    with pytest.raises(InvalidWriteError, match="spark.hudilite.read.smallSliceBytes='1MB': expected an integer"):
        o.spark_conf(_spark({o.SMALL_SLICE_BYTES.key: "1MB"}, classic))


def test_docs_options_page_is_generated_from_the_declarations():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        text = f.read()
    assert o.render_doc(text) == text, "docs/options.md is stale: run scripts/options_doc.py"
    for opt in o.DECLARED:
        assert f"| `{opt.key}` |" in text


def test_no_key_is_read_around_the_declarations():
    """Outside hudilite/options.py the core names keys through the declarations (`X.get`, `X.key`), so a
    key's type, default and check live in one place. ("hoodie.properties" is a file name.)"""
    found = []
    for root, _, files in os.walk(os.path.join(ROOT, "hudilite")):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or path.endswith(os.path.join("hudilite", "options.py")):
                continue
            with open(path, encoding="utf-8") as f:
                for lit in re.findall(r"[\"'](?:hoodie|spark\.hudilite)\.[A-Za-z_.]+[\"']", f.read()):
                    if lit.strip("\"'") != "hoodie.properties":
                        found.append((os.path.relpath(path, ROOT), lit))
    assert found == []
