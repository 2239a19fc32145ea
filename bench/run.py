"""Run the benchmark workload (shared/docs/bench-workload.md) against hudilite and its peers.

    python -m bench.run --n 1000000 --b 100000 --mode uniform --repeat 3 --out results.json
    python -m bench.run --only peers            # everything but hudilite
    python -m bench.run --only hudilite,spark_parquet
    python -m bench.run --only delta,upsert     # delta-rs, steps load -> upsert only

Systems (each repetition uses fresh table dirs, steps run in this order, each timed in-process):

    spark_parquet  plain Spark parquet: load = df.write.partitionBy('dt').parquet; scan = read + group-by agg
    spark_io       Spark insert_overwrite upsert (dbt-spark without a table format): load as above, upsert =
                   touched partitions of the old table UNION batch, window-dedup by id on version,
                   dynamic overwrite of the touched partitions; scan after the upsert
    delta          delta-rs: write_deltalake load (CDF on), DeltaTable.merge with version conditions (batch
                   dedup in DuckDB inside the timed step), scan + agg = DuckDB over to_pyarrow_dataset(),
                   incremental = load_cdf of the merge version (insert + update_postimage rows)
    duckdb         DuckDB single-file database: CREATE TABLE AS load, MERGE INTO upsert, scan + agg
    hudilite       hudilite.write bulk_insert / upsert, hudilite.read snapshot + agg, incremental read + count

Exit code: 0 when every selected system ran and every check matched, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import data as bdata

STEPS = ("load", "upsert", "scan", "incremental")
SYSTEM_STEPS = {
    "spark_parquet": ("load", "scan"),
    "spark_io": ("load", "upsert", "scan"),
    "delta": ("load", "upsert", "scan", "incremental"),
    "duckdb": ("load", "upsert", "scan"),
    "hudilite": ("load", "upsert", "scan", "incremental"),
}
SYSTEMS = tuple(SYSTEM_STEPS)
SPARK_SYSTEMS = ("spark_parquet", "spark_io", "hudilite")
ALIASES = {
    "peers": ("spark_parquet", "spark_io", "delta", "duckdb"),
    "spark": ("spark_parquet", "spark_io"),
    "all": SYSTEMS,
}

SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.driver.memory": "8g",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # cosmetic (keeps logs readable), not in the workload doc
}
DUCKDB_THREADS = 2
DUCKDB_MEMORY = "6GB"

# The scan step's aggregate: one query text for Spark SQL and DuckDB. Touches 9 of the 11 columns
# (all but id and payload).
AGG_SQL = """
SELECT status, count(*) AS n, sum(qty) AS sum_qty, sum(amount) AS sum_amount, avg(score) AS avg_score,
       min(event_ts) AS min_ts, max(event_ts) AS max_ts, max(version) AS max_version,
       sum(user_id) AS sum_user_id, max(dt) AS max_dt, max(length(name)) AS max_name_len
FROM {src} GROUP BY status ORDER BY status
"""
CHECK_SQL = "SELECT count(*), sum(version), bit_xor(id) FROM {src}"


# ----------------------------------------------------------------------------------------------------
# helpers


def files_of(root: Path) -> dict:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            out[p] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def bytes_written(before: dict, after: dict) -> int:
    """Sum of sizes of files created (or rewritten) in the table dir during a step."""
    return sum(v[0] for p, v in after.items() if before.get(p) != v)


def dir_bytes(snap: dict) -> int:
    return sum(v[0] for v in snap.values())


class CheckLog:
    def __init__(self):
        self.rows: list[dict] = []

    def check(self, system: str, rep: int, what: str, expected, actual) -> bool:
        ok = expected == actual
        self.rows.append({"system": system, "rep": rep, "check": what, "expected": expected,
                          "actual": actual, "ok": ok})
        if ok:
            print(f"    check {what}: ok")
        else:
            print(f"\n!!!!!!!! CHECK FAILED: {system} rep {rep} {what}\n!!!!!!!!   expected {expected}"
                  f"\n!!!!!!!!   actual   {actual}\n", flush=True)
        return ok


def checksum_tuple(row) -> dict:
    return {"count": int(row[0]), "sum_version": int(row[1] or 0), "xor_id": int(row[2] or 0)}


def status_summary(rows) -> dict:
    """The integer-valued parts of the agg result, comparable with expected.json's *_by_status."""
    return {r[0]: {"count": int(r[1]), "sum_qty": int(r[2]), "max_version": int(r[7]), "sum_user_id": int(r[8])}
            for r in rows}


# ----------------------------------------------------------------------------------------------------
# systems


class System:
    name = "?"
    bytes_mode = "files"  # "files": files created/rewritten; "growth": size growth of the table dir

    def __init__(self, ctx: "Ctx"):
        self.ctx = ctx
        self.exp = ctx.exp

    def begin(self, path: Path) -> None:
        self.path = path

    def end(self) -> None:
        pass

    # checks run after load / upsert (untimed); return (checksums dict, by-status dict or None)
    def checksums(self) -> dict:
        raise NotImplementedError


class SparkBase(System):
    def spark_sql_one(self, df, sql: str):
        df.createOrReplaceTempView("bench_src")
        return self.ctx.spark.sql(sql.format(src="bench_src")).collect()

    def load_parquet(self):
        spark = self.ctx.spark
        spark.read.parquet(self.exp["paths"]["base"]).write.partitionBy("dt").parquet(str(self.path))

    def read(self):
        return self.ctx.spark.read.parquet(str(self.path))

    def scan(self):
        rows = self.spark_sql_one(self.read(), AGG_SQL)
        return {"agg_rows": rows}

    def checksums(self) -> dict:
        return checksum_tuple(self.spark_sql_one(self.read(), CHECK_SQL)[0])


class SparkParquet(SparkBase):
    name = "spark_parquet"

    def load(self):
        self.load_parquet()


class SparkInsertOverwrite(SparkBase):
    name = "spark_io"

    def load(self):
        self.load_parquet()

    def upsert(self):
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = self.ctx.spark
        batch = spark.read.parquet(self.exp["paths"]["batch"])
        touched = [r[0] for r in batch.select("dt").distinct().collect()]
        old = self.read().where(F.col("dt").isin(touched)).withColumn("op", F.lit("S"))
        w = Window.partitionBy("id").orderBy(F.col("version").desc())
        new = (old.unionByName(batch)
               .withColumn("_rn", F.row_number().over(w))
               .where("_rn = 1 AND op <> 'D'")
               .drop("_rn", "op"))
        (new.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
         .partitionBy("dt").parquet(str(self.path)))
        return {"touched_partitions": len(touched)}


class Hudilite(SparkBase):
    name = "hudilite"
    KW = dict(record_key="id", precombine_field="version", partition_by=("dt",))

    _api: tuple | None = None  # (write, read) captured once, see below

    def __init__(self, ctx):
        super().__init__(ctx)
        if Hudilite._api is None:
            import types

            import hudilite  # an ImportError marks the system failed

            # hudilite/__init__.py defines write()/read() next to subpackages hudilite/write/ and
            # hudilite/read/: the first import of a submodule rebinds the package attribute to the
            # subpackage. Capture the functions before any call so later reps still get them.
            w, r = hudilite.write, hudilite.read
            if isinstance(w, types.ModuleType) or isinstance(r, types.ModuleType):
                raise TypeError("hudilite.write / hudilite.read are shadowed by the subpackages "
                                "hudilite.write / hudilite.read (rename the subpackages or the functions)")
            Hudilite._api = (w, r)
        self.write, self.read_fn = Hudilite._api

    def load(self):
        df = self.ctx.spark.read.parquet(self.exp["paths"]["base"])
        self.load_instant = self.write(df, str(self.path), operation="bulk_insert", **self.KW)
        return {"instant": self.load_instant}

    def upsert(self):
        from pyspark.sql import functions as F

        df = self.ctx.spark.read.parquet(self.exp["paths"]["batch"])
        df = df.withColumn("_hoodie_is_deleted", F.col("op") == "D").drop("op")
        self.upsert_instant = self.write(df, str(self.path), operation="upsert", **self.KW)
        return {"instant": self.upsert_instant}

    def read(self):
        return self.read_fn(self.ctx.spark, str(self.path))

    def incremental(self):
        n = self.read_fn(self.ctx.spark, str(self.path), begin=self.load_instant, end=self.upsert_instant).count()
        return {"rows": n}


class Delta(System):
    name = "delta"
    COLS = bdata.COLUMNS
    # Hudi with partition_by=("dt",) identifies a record by (dt, id) (non-global index); the equivalent
    # MERGE condition includes dt, which also lets delta-rs prune target partitions.
    MERGE_ON = "t.id = s.id AND t.dt = s.dt"

    def __init__(self, ctx):
        super().__init__(ctx)
        import deltalake  # noqa: F401

        self.con = ctx.duck()

    def load(self):
        import pyarrow.dataset as ds
        from deltalake import write_deltalake

        reader = ds.dataset(self.exp["paths"]["base"], format="parquet").scanner(batch_size=131_072).to_reader()
        write_deltalake(str(self.path), reader, partition_by=["dt"],
                        configuration={"delta.enableChangeDataFeed": "true"})

    def upsert(self):
        from deltalake import DeltaTable

        src = self.con.sql(f"SELECT * FROM read_parquet('{self.exp['paths']['batch']}/*.parquet') "
                           "QUALIFY row_number() OVER (PARTITION BY id ORDER BY version DESC) = 1").to_arrow_table()
        cols = {c: f"s.{c}" for c in self.COLS}
        metrics = (DeltaTable(str(self.path))
                   .merge(src, predicate=self.MERGE_ON, source_alias="s", target_alias="t")
                   .when_matched_delete(predicate="s.version > t.version AND s.op = 'D'")
                   .when_matched_update(updates=cols, predicate="s.version > t.version AND s.op <> 'D'")
                   .when_not_matched_insert(updates=cols, predicate="s.op <> 'D'")
                   .execute())
        keep = ("num_source_rows", "num_target_rows_inserted", "num_target_rows_updated",
                "num_target_rows_deleted", "num_target_rows_copied", "num_target_files_added",
                "num_target_files_removed", "execution_time_ms", "scan_time_ms", "rewrite_time_ms")
        return {"merge_metrics": {k: metrics.get(k) for k in keep if k in metrics}}

    def _dataset(self):
        from deltalake import DeltaTable

        return DeltaTable(str(self.path)).to_pyarrow_dataset()

    def scan(self):
        ds_ = self._dataset()
        return {"agg_rows": self.con.sql(AGG_SQL.format(src="ds_")).fetchall(), "engine": "duckdb"}

    def incremental(self):
        import pyarrow as pa
        from deltalake import DeltaTable

        t = DeltaTable(str(self.path))
        v = t.version()
        cdf = pa.RecordBatchReader.from_stream(t.load_cdf(starting_version=v, ending_version=v))
        n = self.con.sql("SELECT count(*) FROM cdf WHERE _change_type IN ('insert', 'update_postimage')"
                         ).fetchall()[0][0]
        return {"rows": n, "delta_version": v}

    def checksums(self) -> dict:
        ds_ = self._dataset()
        return checksum_tuple(self.con.sql(CHECK_SQL.format(src="ds_")).fetchall()[0])

    def end(self):
        self.con.close()


class DuckDB(System):
    name = "duckdb"
    bytes_mode = "growth"
    COLS = bdata.COLUMNS

    def begin(self, path: Path) -> None:
        super().begin(path)
        import duckdb

        path.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(path / "bench.duckdb"))
        self.con.execute(f"SET threads={DUCKDB_THREADS}")
        self.con.execute(f"SET memory_limit='{DUCKDB_MEMORY}'")

    def load(self):
        self.con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{self.exp['paths']['base']}/*.parquet')")
        self.con.execute("CHECKPOINT")

    def upsert(self):
        sets = ", ".join(f"{c} = s.{c}" for c in self.COLS if c != "id")
        names = ", ".join(self.COLS)
        vals = ", ".join(f"s.{c}" for c in self.COLS)
        self.con.execute(f"""
            MERGE INTO t USING (
                SELECT * FROM read_parquet('{self.exp['paths']['batch']}/*.parquet')
                QUALIFY row_number() OVER (PARTITION BY id ORDER BY version DESC) = 1) AS s
            ON (t.id = s.id)
            WHEN MATCHED AND s.version > t.version AND s.op = 'D' THEN DELETE
            WHEN MATCHED AND s.version > t.version THEN UPDATE SET {sets}
            WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT ({names}) VALUES ({vals})""")
        self.con.execute("CHECKPOINT")

    def scan(self):
        return {"agg_rows": self.con.sql(AGG_SQL.format(src="t")).fetchall()}

    def checksums(self) -> dict:
        return checksum_tuple(self.con.sql(CHECK_SQL.format(src="t")).fetchall()[0])

    def end(self):
        self.con.close()


CLASSES = {c.name: c for c in (SparkParquet, SparkInsertOverwrite, Delta, DuckDB, Hudilite)}
TABLE_VERSIONS = ("6", "8", "9")


def parse_table_versions(arg: str | None) -> list[str]:
    """`--table-versions 6,9` -> ["6", "9"]; empty or absent -> [] (new tables get the default version)."""
    out = [v for v in (arg or "").replace(" ", "").split(",") if v]
    bad = [v for v in out if v not in TABLE_VERSIONS]
    if bad or len(set(out)) != len(out):
        raise SystemExit(f"--table-versions: {arg!r} must list distinct versions out of {TABLE_VERSIONS}")
    return out


def versioned(cls: type, version: str) -> str:
    """Register `cls` creating its tables at table `version` (`hoodie.write.table.version`) as the system
    `<name>_v<version>`, with the steps of `cls`; returns that name."""
    name = f"{cls.name}_v{version}"
    if name not in CLASSES:
        opts = {**cls.KW.get("options", {}), "hoodie.write.table.version": version}
        CLASSES[name] = type(f"{cls.__name__}V{version}", (cls,), {"name": name, "KW": dict(cls.KW, options=opts)})
        if cls.name in SYSTEM_STEPS:
            SYSTEM_STEPS[name] = SYSTEM_STEPS[cls.name]
    return name


def interleaved(names: list[str], groups: list[list[str]], rep: int) -> list[str]:
    """`names` in order, each group of versioned systems (one system at several versions) reversed on odd
    repetitions, so that neither version always runs first on a warmer (or more loaded) machine."""
    if rep % 2 == 0:
        return names
    out = list(names)
    for g in groups:
        g = [n for n in g if n in out]
        idx = [out.index(n) for n in g]
        for i, n in zip(idx, reversed(g)):
            out[i] = n
    return out


# ----------------------------------------------------------------------------------------------------
# context: staged data, Spark session, DuckDB connections


class Ctx:
    def __init__(self, exp: dict, spark_conf: dict, warmup: str = "full"):
        self.exp = exp
        self.warmup = warmup
        self.spark_conf = spark_conf
        self.spark = None
        self.spark_start_s = None
        self.spark_warmup_s = None
        self.spark_info = {}

    def start_spark(self, scratch: Path) -> None:
        t0 = time.perf_counter()
        from pyspark.sql import SparkSession

        # Python workers run this interpreter (the one with hudilite and pyarrow), activated venv or not
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        b = SparkSession.builder.appName("hudilite-bench")
        for k, v in self.spark_conf.items():
            b = b.config(k, v)
        self.spark = b.getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark_start_s = time.perf_counter() - t0
        jvm = self.spark.sparkContext._jvm
        self.spark_info = {
            "spark_version": self.spark.version,
            "java_version": jvm.java.lang.System.getProperty("java.version"),
            "jvm_max_heap_gb": round(jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**30, 2),
            "default_parallelism": self.spark.sparkContext.defaultParallelism,
            "conf": {k: self.spark.conf.get(k, None) for k in self.spark_conf if not k.startswith("spark.driver.")}
                    | {k: self.spark.sparkContext.getConf().get(k) for k in self.spark_conf
                       if k.startswith("spark.driver.")},
        }
        print(f"[spark] session start {self.spark_start_s:.2f}s  {self.spark_info}", flush=True)
        if self.warmup == "none":
            return
        # warm-up (not part of any step): the load and scan code paths once, on the base table
        # ("full") or on the small batch ("light"), so that rep 0 of the first system is not a cold JVM
        t0 = time.perf_counter()
        out = scratch / "spark_warmup"
        shutil.rmtree(out, ignore_errors=True)
        src = self.exp["paths"]["base" if self.warmup == "full" else "batch"]
        df = self.spark.read.parquet(src)
        df.select(*bdata.COLUMNS).write.partitionBy("dt").parquet(str(out))
        self.spark.read.parquet(str(out)).createOrReplaceTempView("bench_src")
        self.spark.sql(AGG_SQL.format(src="bench_src")).collect()
        self.spark.sql(CHECK_SQL.format(src="bench_src")).collect()
        shutil.rmtree(out, ignore_errors=True)
        # ... and the shuffle + window + partitioned overwrite path (the batch only)
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        w = Window.partitionBy("id").orderBy(F.col("version").desc())
        b = self.spark.read.parquet(self.exp["paths"]["batch"])
        (b.unionByName(b).withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "op")
         .write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy("dt").parquet(str(out)))
        shutil.rmtree(out, ignore_errors=True)
        self.spark_warmup_s = time.perf_counter() - t0
        print(f"[spark] warm-up ({self.warmup}) {self.spark_warmup_s:.2f}s", flush=True)

    def duck(self):
        import duckdb

        con = duckdb.connect()
        con.execute(f"SET threads={DUCKDB_THREADS}")
        con.execute(f"SET memory_limit='{DUCKDB_MEMORY}'")
        return con


# ----------------------------------------------------------------------------------------------------
# running


def parse_only(only: str | None, skip: str | None) -> tuple[list[str], list[str]]:
    systems: list[str] = []
    steps: list[str] = []
    for tok in (only or "").replace(" ", "").split(","):
        if not tok:
            continue
        if tok in ALIASES:
            systems += ALIASES[tok]
        elif tok in SYSTEMS:
            systems.append(tok)
        elif tok in STEPS:
            steps.append(tok)
        else:
            raise SystemExit(f"--only: unknown token {tok!r} (systems {SYSTEMS}, aliases {tuple(ALIASES)}, "
                             f"steps {STEPS})")
    systems = [s for s in SYSTEMS if s in systems] or list(SYSTEMS)
    for tok in (skip or "").replace(" ", "").split(","):
        if tok:
            drop = ALIASES.get(tok, (tok,))
            systems = [s for s in systems if s not in drop]
    steps = [s for s in STEPS if s in steps] or list(STEPS)
    return systems, steps


def chain(system: str, steps: list[str]) -> list[str]:
    """The system's steps up to the last selected one (earlier steps are prerequisites)."""
    own = SYSTEM_STEPS[system]
    sel = [s for s in own if s in steps]
    if not sel:
        return []
    return list(own[: own.index(sel[-1]) + 1])


def run_system(ctx: Ctx, name: str, steps: list[str], rep: int, path: Path, log: CheckLog,
               raw: list[dict]) -> bool:
    """One repetition of one system on a fresh table dir. Returns False on an exception."""
    exp = ctx.exp
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    sysobj = None
    try:
        sysobj = CLASSES[name](ctx)
        sysobj.begin(path)
        for step in steps:
            gc.collect()
            before = files_of(path)
            t0 = time.perf_counter()
            extra = getattr(sysobj, step)() or {}
            secs = time.perf_counter() - t0
            after = files_of(path)
            if sysobj.bytes_mode == "growth":
                written = max(0, dir_bytes(after) - dir_bytes(before))
            else:
                written = bytes_written(before, after)
            agg_rows = extra.pop("agg_rows", None)
            rec = {"system": name, "rep": rep, "step": step, "seconds": secs, "bytes_written": written,
                   "table_bytes": dir_bytes(after), "table_files": len(after), **extra}
            raw.append(rec)
            print(f"  {name:14s} rep {rep} {step:12s} {secs:8.3f} s  written {written / 1e6:9.1f} MB"
                  f"  {json.dumps(extra, default=str) if extra else ''}", flush=True)
            # untimed checks
            if step == "load":
                log.check(name, rep, "load checksums", exp["base"], sysobj.checksums())
            elif step == "upsert":
                log.check(name, rep, "upsert checksums", exp["final"], sysobj.checksums())
            elif step.startswith("scan"):  # scan, and bench/mor.py's scan_again / scan_compacted
                want = exp["final_by_status"] if "upsert" in steps else exp["base_by_status"]
                got = status_summary(agg_rows)
                log.check(name, rep, "scan aggregate (count/sum_qty/max_version/sum_user_id by status)",
                          want, got)
            elif step == "incremental":
                log.check(name, rep, "incremental rows", exp["incremental_rows"], extra.get("rows"))
        return True
    except Exception as e:  # noqa: BLE001 - a failing system must not abort the others
        print(f"\n!!!!!!!! SYSTEM FAILED: {name} rep {rep}: {type(e).__name__}: {e}", flush=True)
        tb = traceback.format_exc()
        print("\n".join("!!!!!!!!   " + ln for ln in tb.rstrip().splitlines()[-15:]) + "\n", flush=True)
        raw.append({"system": name, "rep": rep, "step": "error", "error": f"{type(e).__name__}: {e}",
                    "traceback": tb})
        return False
    finally:
        if sysobj is not None:
            try:
                sysobj.end()
            except Exception:  # noqa: BLE001
                pass


def summarize(raw: list[dict]) -> dict:
    med: dict = {}
    for r in raw:
        if r["step"] == "error":
            continue
        med.setdefault(r["system"], {}).setdefault(r["step"], {"seconds": [], "bytes_written": []})
        med[r["system"]][r["step"]]["seconds"].append(r["seconds"])
        med[r["system"]][r["step"]]["bytes_written"].append(r["bytes_written"])
    out = {}
    for s, steps in med.items():
        out[s] = {st: {"median_s": statistics.median(v["seconds"]), "min_s": min(v["seconds"]),
                       "n": len(v["seconds"]), "median_bytes_written": int(statistics.median(v["bytes_written"]))}
                  for st, v in steps.items()}
    return out


RATIOS = [
    ("bulk load: hudilite / Spark parquet write", ("hudilite", "load"), ("spark_parquet", "load")),
    ("snapshot scan+agg: hudilite / Spark parquet scan (fresh load, N rows)", ("hudilite", "scan"),
     ("spark_parquet", "scan")),
    ("snapshot scan+agg: hudilite / Spark parquet scan after insert_overwrite (same rows)", ("hudilite", "scan"),
     ("spark_io", "scan")),
    ("upsert: hudilite / Spark insert_overwrite", ("hudilite", "upsert"), ("spark_io", "upsert")),
    ("upsert: hudilite / delta-rs merge", ("hudilite", "upsert"), ("delta", "upsert")),
    ("upsert: hudilite / DuckDB MERGE INTO", ("hudilite", "upsert"), ("duckdb", "upsert")),
    ("incremental read: hudilite / hudilite snapshot scan", ("hudilite", "incremental"), ("hudilite", "scan")),
    ("(peer) incremental: delta-rs CDF / delta-rs scan", ("delta", "incremental"), ("delta", "scan")),
    ("(peer) upsert: delta-rs merge / Spark insert_overwrite", ("delta", "upsert"), ("spark_io", "upsert")),
]


def ratios(summary: dict, versions: list[str] | None = None) -> list[dict]:
    """The RATIOS; with table `versions`, `hudilite` there is its first version, and every hudilite step
    gets a `later version / first version` ratio."""
    out = []
    base = f"hudilite_v{versions[0]}" if versions else "hudilite"
    for label, (a_sys, a_step), (b_sys, b_step) in RATIOS:
        a_sys, b_sys = (base if x == "hudilite" else x for x in (a_sys, b_sys))
        a = summary.get(a_sys, {}).get(a_step, {}).get("median_s")
        b = summary.get(b_sys, {}).get(b_step, {}).get("median_s")
        out.append({"ratio": label, "numerator": f"{a_sys}.{a_step}", "denominator": f"{b_sys}.{b_step}",
                    "value": (a / b) if a is not None and b else None})
    return out + version_ratios(summary, "hudilite", versions or [])


def version_ratios(summary: dict, system: str, versions: list[str]) -> list[dict]:
    """`system` at each later table version / at the first one, step by step (medians of the same run)."""
    out = []
    first = f"{system}_v{versions[0]}" if versions else ""
    for v in versions[1:]:
        other = f"{system}_v{v}"
        for step, med in summary.get(other, {}).items():
            b = summary.get(first, {}).get(step, {}).get("median_s")
            out.append({"ratio": f"{system} {step}: table version {v} / version {versions[0]}",
                        "numerator": f"{other}.{step}", "denominator": f"{first}.{step}",
                        "value": med["median_s"] / b if b else None})
    return out


def print_report(res: dict) -> None:
    summary = res["summary"]
    print("\n==== medians (seconds; MB written)  workload", res["workload"], f"repeat {res['repeat']}")
    hdr = f"{'system':15s}" + "".join(f"{s:>22s}" for s in STEPS)
    print(hdr)
    for s in summary:
        cells = []
        for st in STEPS:
            v = summary[s].get(st)
            cells.append(f"{v['median_s']:9.3f}s {v['median_bytes_written'] / 1e6:8.1f}MB" if v else f"{'-':>22s}")
        print(f"{s:15s}" + "".join(f"{c:>22s}" for c in cells))
    if res.get("spark_session_start_s") is not None:
        warm = res["spark_warmup_s"]  # None with --warmup none
        print(f"(Spark JVM/session start {res['spark_session_start_s']:.2f} s, warm-up "
              f"{'none' if warm is None else format(warm, '.2f') + ' s'}, not included above)")
    print("\n==== ratios (median / median; < 1 means the numerator is faster)")
    for r in res["ratios"]:
        v = "n/a" if r["value"] is None else f"{r['value']:.2f}x"
        print(f"  {v:>8s}  {r['ratio']}")
    bad = [c for c in res["checks"] if not c["ok"]]
    failed = sorted({r["system"] for r in res["raw"] if r["step"] == "error"})
    print(f"\n==== checks: {len(res['checks']) - len(bad)}/{len(res['checks'])} ok"
          + (f"; FAILED: {sorted({(c['system'], c['check']) for c in bad})}" if bad else "")
          + (f"; systems with errors: {failed}" if failed else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hudilite benchmark (see bench/README.md)")
    p.add_argument("--n", type=int, default=1_000_000, help="base rows (quick 1M, reference 10M)")
    p.add_argument("--b", type=int, default=100_000, help="batch rows (quick 100k, reference 1M)")
    p.add_argument("--mode", choices=("uniform", "recent"), default="uniform")
    p.add_argument("--seed", type=int, default=bdata.DEFAULT_SEED)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default=None,
                   help=f"comma list of systems {SYSTEMS}, aliases {tuple(ALIASES)} and/or steps {STEPS}")
    p.add_argument("--skip", default=None, help="comma list of systems/aliases to leave out")
    p.add_argument("--out", default=None, help="JSON file for all raw timings (default <work-dir>/results.json)")
    p.add_argument("--work-dir", default=None, help="default /tmp/hudilite-bench/<N>_<B>_<mode>")
    p.add_argument("--keep-tables", action="store_true", help="keep every repetition's tables (default: last)")
    p.add_argument("--regen", action="store_true", help="regenerate the staged data")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark conf (repeatable), e.g. for hudilite session settings")
    p.add_argument("--warmup", choices=("full", "light", "none"), default="full",
                   help="Spark warm-up before the timed steps: full = write+scan the base table once "
                        "(default), light = the batch only")
    p.add_argument("--isolate", action="store_true",
                   help="run each system in its own child process (own JVM) and merge the results")
    p.add_argument("--table-versions", default=None, metavar="LIST",
                   help="hudilite at these table versions (comma list of 6, 8, 9; e.g. 6,9), as systems "
                        "hudilite_v6, hudilite_v9 interleaved in each repetition (default: the default version)")
    a = p.parse_args(argv)

    systems, steps = parse_only(a.only, a.skip)
    table_versions = parse_table_versions(a.table_versions)
    groups: list[list[str]] = []
    if table_versions and "hudilite" in systems:
        if a.isolate:
            raise SystemExit("--table-versions compares versions inside one process: drop --isolate")
        groups = [[versioned(Hudilite, v) for v in table_versions]]
        i = systems.index("hudilite")
        systems[i:i + 1] = groups[0]
    w = bdata.Workload(a.n, a.b, a.mode, a.seed)
    t0 = time.perf_counter()
    exp = bdata.stage(w, a.work_dir, force=a.regen)
    stage_s = time.perf_counter() - t0
    wd = Path(exp["paths"]["work_dir"])
    out_path = Path(a.out) if a.out else wd / "results.json"

    if a.isolate:
        return run_isolated(a, argv, systems, steps, exp, out_path)

    spark_conf = dict(SPARK_CONF)
    for kv in a.spark_conf:
        k, _, v = kv.partition("=")
        spark_conf[k] = v
    ctx = Ctx(exp, spark_conf, a.warmup)
    res: dict = {
        "workload": w.__dict__, "repeat": a.repeat, "systems": systems, "steps": steps, "table_versions": table_versions,
        "argv": sys.argv if argv is None else argv,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "versions": versions(), "expected": {k: v for k, v in exp.items() if k != "paths"},
        "staging_s": stage_s, "spark_session_start_s": None, "spark_warmup_s": None,
        "raw": [], "checks": [],
    }
    log = CheckLog()
    spark_systems = [s for s in systems if s in SPARK_SYSTEMS or issubclass(CLASSES[s], Hudilite)]
    if spark_systems:
        try:
            ctx.start_spark(wd)
        except Exception as e:  # noqa: BLE001
            print(f"!!!!!!!! Spark failed to start: {e}; Spark systems are skipped")
            res["raw"] += [{"system": s, "rep": 0, "step": "error", "error": f"spark start: {e}"}
                           for s in spark_systems]
            systems = [s for s in systems if s not in spark_systems]
        res["spark_session_start_s"] = ctx.spark_start_s
        res["spark_warmup_s"] = ctx.spark_warmup_s
        res["spark"] = ctx.spark_info

    broken: set[str] = set()
    tables = wd / "tables"
    for rep in range(a.repeat):
        for s in interleaved(systems, groups, rep):
            if s in broken:
                continue
            st = chain(s, steps)
            if not st:
                continue
            path = tables / s / f"rep{rep}"
            print(f"[{s}] rep {rep}: {' -> '.join(st)}  ({path})", flush=True)
            if not run_system(ctx, s, st, rep, path, log, res["raw"]):
                broken.add(s)  # an exception is most likely deterministic: do not retry
            if rep > 0 and not a.keep_tables:
                shutil.rmtree(tables / s / f"rep{rep - 1}", ignore_errors=True)
    res["checks"] = log.rows
    res["summary"] = summarize(res["raw"])
    res["ratios"] = ratios(res["summary"], table_versions)
    res["ok"] = all(c["ok"] for c in log.rows) and not broken and not any(
        r["step"] == "error" for r in res["raw"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=1, default=str))
    print_report(res)
    print(f"\nraw timings: {out_path}")
    if ctx.spark is not None:
        ctx.spark.stop()
    return 0 if res["ok"] else 1


def versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("pyspark", "pyarrow", "deltalake", "duckdb", "numpy", "hudilite"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def run_isolated(a, argv, systems, steps, exp, out_path: Path) -> int:
    """One child process per system; merge raw timings and checks."""
    base_args = [x for x in (sys.argv[1:] if argv is None else argv)]
    # drop options we override
    clean, skip_next = [], False
    for x in base_args:
        if skip_next:
            skip_next = False
            continue
        if x in ("--only", "--skip", "--out"):
            skip_next = True
            continue
        if x.startswith(("--only=", "--skip=", "--out=")) or x in ("--isolate", "--regen"):
            continue
        clean.append(x)
    merged: dict | None = None
    rc = 0
    tmpdir = Path(tempfile.mkdtemp(prefix="hudilite-bench-"))
    for s in systems:
        part = tmpdir / f"{s}.json"
        cmd = [sys.executable, "-m", "bench.run", *clean, "--only", ",".join([s, *steps]), "--out", str(part)]
        print(f"[isolate] {' '.join(cmd)}", flush=True)
        r = subprocess.run(cmd, cwd=str(Path(__file__).resolve().parent.parent))
        rc |= r.returncode
        if not part.exists():
            rc = 1
            continue
        res = json.loads(part.read_text())
        if merged is None:
            merged = res
            merged["systems"] = []
            merged["spark_session_start_s"] = None
            merged["isolated"] = {}
        else:
            merged["raw"] += res["raw"]
            merged["checks"] += res["checks"]
        merged["systems"].append(s)
        merged["isolated"][s] = {"spark_session_start_s": res.get("spark_session_start_s"),
                                 "spark_warmup_s": res.get("spark_warmup_s")}
        if res.get("spark_session_start_s") is not None and merged.get("spark_session_start_s") is None:
            merged["spark_session_start_s"] = res["spark_session_start_s"]
            merged["spark_warmup_s"] = res["spark_warmup_s"]
            merged["spark"] = res.get("spark")
    shutil.rmtree(tmpdir, ignore_errors=True)
    if merged is None:
        return 1
    merged["summary"] = summarize(merged["raw"])
    merged["ratios"] = ratios(merged["summary"])
    merged["ok"] = rc == 0 and all(c["ok"] for c in merged["checks"])
    out_path.write_text(json.dumps(merged, indent=1, default=str))
    print_report(merged)
    print(f"\nraw timings: {out_path}")
    return 0 if merged["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
