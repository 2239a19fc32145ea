"""Write-audit-publish and partition readiness for a model's commit (`audit_before_publish`, `mark_ready`).

With `audit_before_publish` the model's data is written as a pending (inflight) instant, its generic tests run
against that data, and it is committed only if they pass (else rolled back from its markers): readers never
see a failing version. With `mark_ready` the commit marks the partitions it wrote ready.
"""

from __future__ import annotations

import re
from typing import Any, Dict

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import functions as F

import hudilite
from dbt.adapters.hudilite.model_config import config_flag
from dbt.adapters.hudilite.run_state import model_key

logger = AdapterLogger("Hudilite")

_AUDITED = ("not_null", "unique", "accepted_values", "relationships")


def set_publish_options(env, schema: str, identifier: str, cfg: Dict[str, Any]) -> None:
    """Remember the model's `audit_before_publish` / `mark_ready` configs (and its generic tests) for its
    write in this invocation."""
    env.run.set_publish(model_key(schema, identifier), config_flag(cfg, "audit_before_publish"),
                        config_flag(cfg, "mark_ready"), cfg.get("audit_tests") or [])


def write_model(env, schema: str, identifier: str, df, path: str, **kw):
    """hudilite.write for a model's commit. With `audit_before_publish` the data is written as a pending
    (inflight) instant, the model's generic tests run against it, and it is committed only if they pass (else
    rolled back from its markers). With `mark_ready` the commit marks the partitions it wrote ready."""
    audit, ready, tests = env.run.publish(model_key(schema, identifier))
    if not audit and not ready:
        return hudilite.write(df, path, **kw)
    pending = hudilite.write(df, path, commit=False, **kw)
    try:
        failures = run_audits(env, pending, schema, tests) if audit else []
    except BaseException:
        pending.abort()
        raise
    if failures:
        pending.abort()
        raise DbtRuntimeError(
            f"hudilite: audit of {schema}.{identifier} failed, nothing was published (the write "
            f"{pending.instant_time} was rolled back; readers never saw it): " + "; ".join(failures))
    return pending.complete({"hudilite.audited": "true"} if audit else None, ready_partitions=True if ready else None)


def run_audits(env, pending, schema: str, tests) -> list:
    """Run the model's generic tests (not_null, unique, accepted_values, relationships) against the pending
    write's data. Returns the failures (severity error); warnings are logged."""
    data = pending.read(env.spark)
    failures = []
    for t in tests:
        name = str(t.get("name") or "")
        kw = dict(t.get("kwargs") or {})
        col = kw.get("column_name")
        df = data.filter(F.expr(t["where"])) if t.get("where") else data
        if name not in _AUDITED or not col:
            logger.warning(f"hudilite: test {t.get('unique_id') or name} cannot run before publish (only "
                           f"{', '.join(_AUDITED)} can); it runs after the commit with dbt test")
            continue
        c = F.expr(str(col))
        if name == "not_null":
            n = df.filter(c.isNull()).count()
        elif name == "unique":
            n = df.filter(c.isNotNull()).groupBy(c.alias("v")).count().filter(F.col("count") > 1).count()
        elif name == "accepted_values":
            n = df.filter(c.isNotNull() & ~c.isin(list(kw.get("values") or []))).count()
        else:
            m = re.search(r"ref\(\s*['\"]([^'\"]+)['\"]\s*\)", str(kw.get("to") or ""))
            if not m:
                logger.warning(f"hudilite: relationships test with to={kw.get('to')!r} cannot run before publish")
                continue
            parent = env.spark.table(f"{schema}.{m.group(1)}").select(F.expr(str(kw.get("field"))).alias("__p"))
            n = df.filter(c.isNotNull()).join(parent, c == F.col("__p"), "left_anti").count()
        if n:
            msg = f"{t.get('unique_id') or name} ({name} on {col}): {n} failing row(s)"
            if str(t.get("severity") or "error").lower() == "warn":
                logger.warning(f"hudilite: audit warning: {msg}")
            else:
                failures.append(msg)
    return failures
