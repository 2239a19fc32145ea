"""Deterministic data for the one benchmark workload (shared/docs/bench-workload.md).

Stages, under a work dir (default /tmp/hudilite-bench/<N>_<B>_<mode>/):

    base/part-00000.parquet ...   N rows, 11 columns, ~128k-row row groups, one file per 1,048,576 rows
    batch/part-00000.parquet      B rows, the same 11 columns + ``op`` ('U' | 'I' | 'D')
    expected.json                 checksums of the base and of the final snapshot, expected
                                  incremental row count, per-status aggregates, batch composition

Base table: ``id`` 1..N (auto-increment style, increases with ``dt``), ``dt`` = 30 days starting at
2024-01-01 (equal slices of the key range), ``version`` in [100, 10000).

Change batch (B rows, shuffled):
  * 5% in-batch duplicates: same key (and dt) as one of the primary rows below, lower version (superseded);
  * 2% late rows: existing keys, version below the stored one (they must lose; 10% of them are deletes);
  * the rest ("primary" rows): 70% updates (op 'U', keep the key's dt, version = stored + 1..999),
    5% deletes (op 'D', version = stored + 1..999), 25% inserts (op 'I', new keys N+1.., dt = day 31).
  Update / delete / late keys are distinct and drawn from all live keys ("uniform") or from the newest
  10% of keys ("recent": the last 3 days).

Expected final snapshot: per key the highest version wins (stored row vs every batch row); if the winner is
a delete the key is gone; late rows change nothing. Computed twice: with DuckDB from the staged parquet
files (a FULL OUTER JOIN of the base with the deduplicated batch) and from the generator's own
bookkeeping with numpy; both must agree.

Run ``python -m bench.data --n 1000000 --b 100000 --mode uniform`` to stage (cached: a second call
with the same parameters reuses the files).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

GENERATOR_VERSION = 2
DEFAULT_SEED = 20240101
DEFAULT_ROOT = "/tmp/hudilite-bench"
ROW_GROUP = 131_072  # ~128k rows per row group
CHUNK = 1_048_576  # rows generated per chunk = rows per staged base file (8 row groups)
N_DAYS = 30
START_DATE = dt.date(2024, 1, 1)
EPOCH = dt.date(1970, 1, 1)
START_DAY = (START_DATE - EPOCH).days  # days since epoch of day 1
NEW_DAY = START_DAY + N_DAYS  # day 31: where inserts go
US_PER_DAY = 86_400 * 1_000_000
STATUSES = np.array(["new", "paid", "shipped", "delivered", "cancelled", "returned"], dtype=object)
STATUS_P = np.array([0.10, 0.20, 0.25, 0.35, 0.06, 0.04])
FIRST = ["ada", "alan", "grace", "edsger", "barbara", "donald", "ken", "dennis", "linus", "guido",
         "bjarne", "james", "john", "margaret", "frances", "leslie", "tony", "niklaus", "robin", "radia",
         "shafi", "silvio", "whitfield", "martin", "judea", "yoshua", "geoffrey", "yann", "fei", "andrew"]
LAST = ["lovelace", "turing", "hopper", "dijkstra", "liskov", "knuth", "thompson", "ritchie", "torvalds",
        "rossum", "stroustrup", "gosling", "mccarthy", "hamilton", "allen", "lamport", "hoare", "wirth",
        "milner", "perlman", "goldwasser", "micali", "diffie", "hellman", "pearl", "bengio", "hinton",
        "lecun", "li", "ng", "cerf", "kahn", "backus", "naur", "codd", "stonebraker", "gray", "bachman"]
NAMES = np.array([f"{f} {l}" for f in FIRST for l in LAST], dtype=object)
PAYLOAD_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("version", pa.int64()),
    ("dt", pa.date32()),
    ("event_ts", pa.timestamp("us", tz="UTC")),
    ("user_id", pa.int32()),
    ("qty", pa.int32()),
    ("amount", pa.float64()),
    ("score", pa.float64()),
    ("status", pa.string()),
    ("name", pa.string()),
    ("payload", pa.string()),
])
BATCH_SCHEMA = SCHEMA.append(pa.field("op", pa.string()))
COLUMNS = SCHEMA.names


@dataclass(frozen=True)
class Workload:
    n: int
    b: int
    mode: str  # "uniform" | "recent"
    seed: int = DEFAULT_SEED

    @property
    def name(self) -> str:
        return f"{self.n}_{self.b}_{self.mode}"


def default_work_dir(w: Workload) -> Path:
    suffix = "" if w.seed == DEFAULT_SEED else f"_s{w.seed}"
    return Path(DEFAULT_ROOT) / f"{w.name}{suffix}"


def day_of(ids: np.ndarray, n: int) -> np.ndarray:
    """dt (days since epoch) of base keys 1..n: 30 equal slices of the key range."""
    return (START_DAY + ((ids - 1) * N_DAYS) // n).astype(np.int32)


# ----------------------------------------------------------------------------------------------------
# column generators


def _payload(rng: np.random.Generator, n: int) -> pa.Array:
    lengths = rng.integers(36, 53, n, dtype=np.int32)  # 36..52 chars, mean 44
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = PAYLOAD_ALPHABET[rng.integers(0, len(PAYLOAD_ALPHABET), int(offsets[-1]), dtype=np.uint8)]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def _rows(rng: np.random.Generator, ids: np.ndarray, versions: np.ndarray, days: np.ndarray,
          user_id: np.ndarray | None = None) -> dict:
    """All 11 columns for the given keys/versions/days; other values random."""
    n = len(ids)
    if user_id is None:
        user_id = rng.integers(0, 1_000_000, n, dtype=np.int32)
    ts = days.astype(np.int64) * US_PER_DAY + rng.integers(0, US_PER_DAY, n, dtype=np.int64)
    return {
        "id": pa.array(ids.astype(np.int64)),
        "version": pa.array(versions.astype(np.int64)),
        "dt": pa.array(days.astype(np.int32)).cast(pa.date32()),
        "event_ts": pa.array(ts).cast(pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(user_id.astype(np.int32)),
        "qty": pa.array(rng.integers(1, 100, n, dtype=np.int32)),
        "amount": pa.array(np.round(rng.gamma(2.0, 400.0, n), 2)),
        "score": pa.array(rng.random(n)),
        "status": pa.array(STATUSES[rng.choice(len(STATUSES), n, p=STATUS_P)], pa.string()),
        "name": pa.array(NAMES[rng.integers(0, len(NAMES), n)], pa.string()),
        "payload": _payload(rng, n),
    }


def _write(path: Path, table: pa.Table, writer: pq.ParquetWriter | None = None) -> None:
    if writer is not None:
        writer.write_table(table, row_group_size=ROW_GROUP)
    else:
        pq.write_table(table, path, row_group_size=ROW_GROUP, compression="snappy")


# ----------------------------------------------------------------------------------------------------
# staging


def stage(w: Workload, work_dir: Path | str | None = None, force: bool = False, verbose: bool = True) -> dict:
    """Generate (or reuse) the staged files; return the expected.json content (with paths added)."""
    wd = Path(work_dir) if work_dir else default_work_dir(w)
    exp_path = wd / "expected.json"
    if exp_path.exists() and not force:
        exp = json.loads(exp_path.read_text())
        if exp.get("generator_version") == GENERATOR_VERSION and exp.get("workload") == w.__dict__:
            if verbose:
                print(f"[data] reusing staged data in {wd}")
            return _with_paths(exp, wd)
    if w.mode not in ("uniform", "recent"):
        raise ValueError(f"mode must be uniform|recent, not {w.mode!r}")
    if w.n < 1000 or w.b < 100:
        raise ValueError("need n >= 1000 and b >= 100")
    for sub in ("base", "batch"):
        shutil.rmtree(wd / sub, ignore_errors=True)
    if exp_path.exists():
        exp_path.unlink()
    (wd / "base").mkdir(parents=True, exist_ok=True)
    (wd / "batch").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    # ---- base table, in chunks; keep version and user_id per key for the batch (12 bytes/row)
    n = w.n
    base_version = np.empty(n, dtype=np.int64)
    base_user = np.empty(n, dtype=np.int32)
    for ci, start in enumerate(range(0, n, CHUNK)):
        end = min(n, start + CHUNK)
        rng = np.random.default_rng([w.seed, 1, ci])
        ids = np.arange(start + 1, end + 1, dtype=np.int64)
        versions = rng.integers(100, 10_000, end - start, dtype=np.int64)
        cols = _rows(rng, ids, versions, day_of(ids, n))
        base_version[start:end] = versions
        base_user[start:end] = cols["user_id"].to_numpy()
        _write(wd / "base" / f"part-{ci:05d}.parquet", pa.table(cols, schema=SCHEMA))
        del cols
    t_base = time.perf_counter() - t0

    # ---- change batch
    rng = np.random.default_rng([w.seed, 2])
    b = w.b
    n_dup = round(0.05 * b)
    n_late = round(0.02 * b)
    rest = b - n_dup - n_late
    n_upd = round(0.70 * rest)
    n_del = round(0.05 * rest)
    n_ins = rest - n_upd - n_del
    lo = 1 if w.mode == "uniform" else n - n // 10 + 1  # key pool [lo, n]
    pool = n - lo + 1
    need = n_upd + n_del + n_late
    if need > pool:
        raise ValueError(f"batch needs {need} distinct existing keys, pool has {pool}")
    keys = lo + rng.choice(pool, need, replace=False).astype(np.int64)
    upd_ids, del_ids, late_ids = keys[:n_upd], keys[n_upd:n_upd + n_del], keys[n_upd + n_del:]
    ins_ids = np.arange(n + 1, n + 1 + n_ins, dtype=np.int64)

    upd_v = base_version[upd_ids - 1] + rng.integers(1, 1000, n_upd)
    del_v = base_version[del_ids - 1] + rng.integers(1, 1000, n_del)
    late_v = base_version[late_ids - 1] - rng.integers(1, 50, n_late)  # stored >= 100, so >= 51
    ins_v = rng.integers(100, 10_000, n_ins, dtype=np.int64)

    prim_ids = np.concatenate([upd_ids, del_ids, ins_ids])
    prim_v = np.concatenate([upd_v, del_v, ins_v])
    prim_op = np.concatenate([np.full(n_upd, "U", object), np.full(n_del, "D", object),
                              np.full(n_ins, "I", object)])
    # in-batch duplicates: copies of primary keys with a lower version ('I' for new keys, 'U' otherwise)
    dup_src = rng.choice(rest, n_dup, replace=False)
    dup_ids = prim_ids[dup_src]
    dup_v = prim_v[dup_src] - rng.integers(1, 50, n_dup)
    dup_op = np.where(prim_op[dup_src] == "I", "I", "U").astype(object)
    late_op = np.where(rng.random(n_late) < 0.10, "D", "U").astype(object)

    all_ids = np.concatenate([prim_ids, dup_ids, late_ids])
    all_v = np.concatenate([prim_v, dup_v, late_v])
    all_op = np.concatenate([prim_op, dup_op, late_op])
    existing = all_ids <= n
    days = np.where(existing, day_of(np.minimum(all_ids, n), n), NEW_DAY).astype(np.int32)
    users = np.where(existing, base_user[np.minimum(all_ids, n) - 1],
                     rng.integers(0, 1_000_000, len(all_ids), dtype=np.int32)).astype(np.int32)
    perm = rng.permutation(b)
    cols = _rows(rng, all_ids[perm], all_v[perm], days[perm], users[perm])
    cols["op"] = pa.array(all_op[perm], pa.string())
    batch = pa.table(cols, schema=BATCH_SCHEMA)
    _write(wd / "batch" / "part-00000.parquet", batch)
    t_batch = time.perf_counter() - t0 - t_base

    # ---- expected numbers, by construction (numpy)
    def xor(a: np.ndarray) -> int:
        return int(np.bitwise_xor.reduce(a)) if len(a) else 0

    ids_all = np.arange(1, n + 1, dtype=np.int64)
    base_ck = {"count": n, "sum_version": int(base_version.sum()), "xor_id": xor(ids_all)}
    final_np = {
        "count": n - n_del + n_ins,
        "sum_version": int(base_version.sum() + (upd_v - base_version[upd_ids - 1]).sum()
                           - base_version[del_ids - 1].sum() + ins_v.sum()),
        "xor_id": base_ck["xor_id"] ^ xor(del_ids) ^ xor(ins_ids),
    }
    incr_np = n_upd + n_ins
    del base_version, base_user, ids_all

    # ---- expected numbers from the staged files (DuckDB)
    duck = expected_from_files(wd)
    if duck["base"] != base_ck or duck["final"] != final_np or duck["incremental_rows"] != incr_np:
        raise AssertionError(f"expected numbers disagree: numpy base={base_ck} final={final_np} "
                             f"incr={incr_np}; duckdb={duck}")
    t_exp = time.perf_counter() - t0 - t_base - t_batch

    base_bytes = sum(f.stat().st_size for f in (wd / "base").glob("*.parquet"))
    exp = {
        "generator_version": GENERATOR_VERSION,
        "workload": w.__dict__,
        "base": base_ck,
        "final": final_np,
        "incremental_rows": incr_np,
        "base_by_status": duck["base_by_status"],
        "final_by_status": duck["final_by_status"],
        "batch_composition": {"rows": b, "dup": n_dup, "late": n_late, "late_deletes": int((late_op == "D").sum()),
                              "update": n_upd, "delete": n_del, "insert": n_ins,
                              "touched_partitions": duck["touched_partitions"]},
        "staged": {"base_files": len(list((wd / "base").glob("*.parquet"))), "base_bytes": base_bytes,
                   "base_bytes_per_row": round(base_bytes / n, 1),
                   "batch_bytes": (wd / "batch" / "part-00000.parquet").stat().st_size},
        "gen_seconds": {"base": round(t_base, 2), "batch": round(t_batch, 2), "expected": round(t_exp, 2)},
    }
    exp_path.write_text(json.dumps(exp, indent=1))
    if verbose:
        print(f"[data] staged {w.name} in {wd}: base {n} rows ({exp['staged']['base_bytes_per_row']} B/row), "
              f"batch {b} rows, {exp['gen_seconds']}")
    return _with_paths(exp, wd)


def _with_paths(exp: dict, wd: Path) -> dict:
    exp = dict(exp)
    exp["paths"] = {"work_dir": str(wd), "base": str(wd / "base"), "batch": str(wd / "batch")}
    return exp


def expected_from_files(wd: Path | str, threads: int = 2) -> dict:
    """Expected results computed with DuckDB from the raw staged parquet files."""
    import duckdb

    wd = Path(wd)
    con = duckdb.connect()
    con.execute(f"SET threads={threads}")
    con.execute("SET memory_limit='4GB'")
    con.execute("SET preserve_insertion_order=false")
    base = f"read_parquet('{wd}/base/*.parquet')"
    batch = f"read_parquet('{wd}/batch/*.parquet')"
    row = con.sql(f"SELECT count(*), sum(version)::BIGINT, bit_xor(id) FROM {base}").fetchall()[0]
    base_ck = {"count": row[0], "sum_version": int(row[1]), "xor_id": int(row[2])}
    con.execute(f"""
        CREATE TEMP VIEW j AS
        WITH b AS (SELECT * FROM {batch}
                   QUALIFY row_number() OVER (PARTITION BY id ORDER BY version DESC) = 1)
        SELECT b.id IS NOT NULL AND (t.id IS NULL OR b.version > t.version) AS w, b.op AS op,
               {", ".join(f"t.{c} AS t_{c}" for c in COLUMNS)},
               {", ".join(f"b.{c} AS b_{c}" for c in COLUMNS)}
        FROM {base} t FULL OUTER JOIN b ON t.id = b.id
    """)
    pick = ", ".join(f"CASE WHEN w THEN b_{c} ELSE t_{c} END AS {c}" for c in COLUMNS)
    con.execute(f"CREATE TEMP VIEW final AS SELECT {pick} FROM j WHERE NOT (w AND op = 'D')")
    row = con.sql("SELECT count(*), sum(version)::BIGINT, bit_xor(id) FROM final").fetchall()[0]
    final_ck = {"count": row[0], "sum_version": int(row[1]), "xor_id": int(row[2])}
    incr = con.sql("SELECT count(*) FROM j WHERE w AND op <> 'D'").fetchall()[0][0]
    def by_status(src: str) -> dict:
        return {r[0]: {"count": r[1], "sum_qty": int(r[2]), "max_version": int(r[3]), "sum_user_id": int(r[4])}
                for r in con.sql("SELECT status, count(*), sum(qty)::BIGINT, max(version), sum(user_id)::BIGINT "
                                 f"FROM {src} GROUP BY status ORDER BY status").fetchall()}

    touched = con.sql(f"SELECT count(DISTINCT dt) FROM {batch}").fetchall()[0][0]
    res = {"base": base_ck, "final": final_ck, "incremental_rows": incr,
           "base_by_status": by_status(base), "final_by_status": by_status("final"),
           "touched_partitions": touched}
    con.close()
    return res


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--b", type=int, default=100_000)
    p.add_argument("--mode", choices=("uniform", "recent"), default="uniform")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--force", action="store_true", help="regenerate even if staged data exists")
    a = p.parse_args(argv)
    exp = stage(Workload(a.n, a.b, a.mode, a.seed), a.work_dir, force=a.force)
    print(json.dumps({k: v for k, v in exp.items() if not k.endswith("_by_status")}, indent=1))


if __name__ == "__main__":
    main()


def add_workload_args(p, *, repeat: int) -> None:
    """The workload's command-line arguments, the same in every benchmark script (shared/docs/bench-workload.md)."""
    p.add_argument("--n", type=int, default=1_000_000, help="base rows (quick 1M, reference 10M)")
    p.add_argument("--b", type=int, default=100_000, help="batch rows (quick 100k, reference 1M)")
    p.add_argument("--mode", choices=("uniform", "recent"), default="uniform")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--repeat", type=int, default=repeat)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", default=None)


def stage_args(a) -> tuple["Workload", dict, Path]:
    """The workload of parsed `add_workload_args` arguments, staged: (workload, expectations, work dir)."""
    w = Workload(a.n, a.b, a.mode, a.seed)
    exp = stage(w, a.work_dir)
    return w, exp, Path(exp["paths"]["work_dir"])
