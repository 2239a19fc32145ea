"""The sample pipeline's driver and its reference computation (used by run_sample.py and the test suite).

ods_orders (incremental upsert of each batch of change events)
  -> dwd_orders (incremental upsert of hudilite.changes(ref('ods_orders')))
  -> ads_orders_hourly, ads_orders_daily (materialized='aggregate' over dwd_orders)

The run: batch 1; a late ingestion job starts writing batch 9 into the ODS table (pending); batch 2 lands in
the ODS and the DWD/ADS consume it while batch 9 is still in flight; batch 9 then completes (requested before
the DWD's checkpoint, completed after it); batch 3 with a DWD run that FAILS while writing (ADS skipped); the
recovery run; a compaction of ads_orders_hourly (a merge-on-read table); batch 4; `dbt test`. Every ODS commit must be consumed by exactly one DWD run.
"""

from __future__ import annotations

import csv
import json
import os
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
LATE_BATCH = 9
ODS_ORDER = [1, 2, LATE_BATCH, 3, 4]  # ODS commits in completion order


def events() -> list[dict]:
    with open(os.path.join(HERE, "seeds", "order_events.csv"), newline="") as f:
        return list(csv.DictReader(f))


def expected_ods(batches=ODS_ORDER) -> dict:
    """Apply the change events batch by batch in commit order (highest event_seq per order inside a batch; a
    stored row is only replaced by an event at least as new; 'd' deletes)."""
    evs = events()
    state: dict = {}
    for b in batches:
        winners: dict = {}
        for e in evs:
            if int(e["batch"]) != b:
                continue
            k = int(e["order_id"])
            if k not in winners or int(e["event_seq"]) >= int(winners[k]["event_seq"]):
                winners[k] = e
        for k, e in winners.items():
            if k in state and int(e["event_seq"]) < int(state[k]["event_seq"]):
                continue
            if e["op"] == "d":
                state.pop(k, None)
            else:
                state[k] = e
    return state


def customers() -> dict:
    with open(os.path.join(HERE, "seeds", "customers.csv"), newline="") as f:
        return {r["customer_id"]: r for r in csv.DictReader(f)}


def expected_dwd(batches=ODS_ORDER) -> dict:
    cust = customers()
    out = {}
    for k, e in expected_ods(batches).items():
        out[k] = {"order_id": k, "customer_id": e["customer_id"], "country": cust[e["customer_id"]]["country"],
                  "status": e["status"].upper(), "amount": Decimal(e["amount"]), "order_date": e["order_date"],
                  "order_hour": e["created_at"][:13] + ":00:00"}
    return out


def expected_hourly(dwd: dict) -> dict:
    groups: dict = {}
    for r in dwd.values():
        groups.setdefault((r["order_date"], r["order_hour"], r["status"]), []).append(r)
    return {k: (len(v), sum(r["amount"] for r in v), min(r["amount"] for r in v), max(r["amount"] for r in v),
                len({r["customer_id"] for r in v})) for k, v in groups.items()}


def expected_daily(dwd: dict) -> dict:
    groups: dict = {}
    for r in dwd.values():
        if r["status"] != "PENDING":
            groups.setdefault((r["order_date"], r["country"]), []).append(r)
    return {k: (len(v), sum(r["amount"] for r in v), max(r["amount"] for r in v),
                len({r["customer_id"] for r in v})) for k, v in groups.items()}


def start_late_commit(spark, schema: str, ods_path: str):
    """The late ingestion job: batch 9 written into the ODS table, not yet committed (a PendingWrite)."""
    import hudilite
    from pyspark.sql import functions as F

    df = (spark.table(f"{schema}.order_events").filter(F.col("batch") == LATE_BATCH)
          .select("order_id", "customer_id", "status", "amount", "order_date", "created_at", "changed_at",
                  "event_seq", "op", (F.col("op") == "d").alias("_hoodie_is_deleted")))
    return hudilite.write(df, ods_path, record_key="order_id", precombine_field="event_seq",
                          partition_by="order_date", commit=False,
                          options={"hoodie.write.concurrency.mode": "optimistic_concurrency_control"})


def checkpoints(dwd_path: str) -> list[tuple[str, dict]]:
    """(commit, checkpoints) of every DWD commit, oldest first."""
    from hudilite.table import HoodieTable

    tl = HoodieTable.open(dwd_path).timeline
    out = []
    for inst in tl.completed():
        v = (tl.read_metadata(inst).get("extraMetadata") or {}).get("hudilite.checkpoints")
        out.append((inst.timestamp, json.loads(v) if v else {}))
    return out


def run(dbt, spark_of, schema: str, warehouse: str) -> dict:
    """Drive the pipeline. `dbt(*args, ok=True)` runs one dbt command (and checks its success/failure);
    `spark_of()` returns the process's SparkSession. Returns what the drill observed."""
    from hudilite.reader.ranges import completion_map
    from hudilite.table import HoodieTable

    ods = os.path.join(warehouse, schema, "ods_orders")
    dwd = os.path.join(warehouse, schema, "dwd_orders")
    seen: dict = {}
    dbt("seed")
    dbt("run", "--vars", "{batch: 1}")
    late = start_late_commit(spark_of(), schema, ods)
    dbt("run", "-s", "ods_orders", "--vars", "{batch: 2}")
    dbt("run", "-s", "dwd_orders+", "--vars", "{batch: 2}")
    seen["checkpoint_before_late"] = checkpoints(dwd)[-1][1][ods]
    late_result = late.complete()
    seen["late_instant"] = str(late_result)
    seen["late_completion"] = completion_map(HoodieTable.open(ods))[str(late_result)]
    dwd_commits = len(checkpoints(dwd))
    dbt("run", "--vars", "{batch: 3, fail_dwd: true}", ok=False)  # ods_orders commits, dwd_orders fails
    seen["dwd_commits_unchanged_by_failure"] = len(checkpoints(dwd)) == dwd_commits
    dbt("run", "-s", "dwd_orders+", "--vars", "{batch: 3}")       # recovery: the same range, plus batch 3
    # ads_orders_hourly is merge-on-read: compact its log files between batches (what `hudilite compaction
    # run` does); its catalog entry shows the same rows before and after
    from hudilite.services.compaction import compact

    seen["hourly_compaction"] = compact(os.path.join(warehouse, schema, "ads_orders_hourly"), force=True)
    dbt("run", "--vars", "{batch: 4}")
    dbt("test")
    seen["ods_completions"] = sorted(completion_map(HoodieTable.open(ods)).values())
    seen["dwd_checkpoints"] = [c.get(ods) for _, c in checkpoints(dwd)]
    return seen


def check(spark, schema: str, seen: dict) -> list[str]:
    """Compare the pipeline's tables with the reference; returns the problems found (empty: all good)."""
    import hudilite

    hudilite.register(spark)  # ads_orders_hourly is merge-on-read: its catalog entry reads through hudilite
    problems = []
    want = expected_dwd()
    got = {r["order_id"]: {"order_id": r["order_id"], "customer_id": r["customer_id"], "country": r["country"],
                           "status": r["status"], "amount": r["amount"], "order_date": str(r["order_date"]),
                           "order_hour": str(r["order_hour"])}
           for r in spark.sql(f"select * from {schema}.dwd_orders").collect()}
    if got != want:
        problems.append(f"dwd_orders differs from the reference: got {sorted(got)}, want {sorted(want)}")
    hourly = {(str(r["order_date"]), str(r["order_hour"]), r["status"]):
              (r["orders"], r["revenue"], r["min_amount"], r["max_amount"], r["customers"])
              for r in spark.sql(f"select * from {schema}.ads_orders_hourly").collect()}
    if hourly != expected_hourly(want):
        problems.append(f"ads_orders_hourly differs: got {hourly}, want {expected_hourly(want)}")
    avg_ok = all(abs(r["avg_amount"] - r["revenue"] / r["orders"]) < Decimal("0.0001")
                 for r in spark.sql(f"select * from {schema}.ads_orders_hourly").collect())
    if not avg_ok:
        problems.append("ads_orders_hourly.avg_amount != revenue / orders")
    daily = {(str(r["order_date"]), r["country"]): (r["orders"], r["revenue"], r["largest_order"], r["customers"])
             for r in spark.sql(f"select * from {schema}.ads_orders_daily").collect()}
    if daily != expected_daily(want):
        problems.append(f"ads_orders_daily differs: got {daily}, want {expected_daily(want)}")
    # exactly once: consecutive DWD checkpoints partition the ODS commits; each ODS commit in one range
    cps = [c for c in seen["dwd_checkpoints"] if c]
    if cps != sorted(set(cps)):
        problems.append(f"DWD checkpoints do not advance strictly: {cps}")
    ranges = list(zip([None] + cps[:-1], cps))
    for c in seen["ods_completions"]:
        n = sum(1 for lo, hi in ranges if (lo is None or lo < c) and c <= hi)
        if n != 1:
            problems.append(f"ODS commit completed at {c} was consumed {n} times")
    if not (seen["late_instant"] < seen["checkpoint_before_late"] < seen["late_completion"]):
        problems.append("the late commit was not late: requested before the DWD checkpoint, completed after")
    if not seen["dwd_commits_unchanged_by_failure"]:
        problems.append("the failed DWD run committed")
    return problems
