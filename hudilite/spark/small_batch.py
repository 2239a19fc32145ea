"""Small Spark inputs as Arrow, for writes that skip Spark jobs (`hudilite.write.small.batch.*`).

A write's fixed cost in Spark (tagging, profile, routing and merging are one job each) dwarfs the work for a
few hundred rows; the driver-local writer (`hudilite.writer.local`) does the same write in this process. This
module decides cheaply whether an input is small and, if so, hands over its rows:

1. the optimized plan's size estimate (no job): above the byte limit the input is not small. Unknown sizes
   (sources without statistics report Spark's default, 8 EiB; a projection over one scales that down by the
   columns' widths, so anything from 1 PiB up is taken as unknown) fall through to 2 - the estimate of a scan
   is the files' size on disk, so it can only rule inputs out, never in.
2. one job collecting at most `max_rows + 1` rows as Arrow (classic `toArrow`, Spark Connect `toArrow` in the
   client): more rows or more bytes than the limits is not small, and the input is then evaluated again by
   the Spark write. Otherwise these rows are the batch - evaluated once, as a persisted input would be.
   Over Spark Connect the job's reply also gives the input's schema, so a write collects before it asks
   for the input's columns (`WriteClient.run`): no analysis round trip of its own.
"""

from __future__ import annotations

import re

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from hudilite.spark.schema import spark_to_arrow
from hudilite.spark.session import is_connect

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}
# Spark's size of a plan without statistics is spark.sql.defaultSizeInBytes (Long.MaxValue); a projection over
# such a plan (Python rows, an RDD) scales it by the ratio of row widths, e.g. to 5.4 EiB. No input a write
# could take as a batch is near this size, and taking a real estimate for unknown only costs one limited job.
_UNKNOWN = 1 << 50


def plan_size(df) -> int | None:
    """The optimized plan's estimated size in bytes, or None when Spark does not know it (no job runs)."""
    try:
        if is_connect(df.sparkSession):
            # Connect has no plan handle: the "cost" explain prints the root's Statistics first
            m = re.search(r"Statistics\(sizeInBytes=([\d.]+)\s*([KMGTPE]?i?B)", df._explain_string(mode="cost"))
            if not m:
                return None
            size = int(float(m.group(1)) * _UNITS[m.group(2)])
            return None if size >= _UNKNOWN else size
        v = df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
        size = v if isinstance(v, int) else int(v.toString())  # py4j hands a Scala BigInt over as an int
    except Exception:  # noqa: BLE001 - an estimate is an optimisation: without one, collect with a limit
        return None
    return None if size >= _UNKNOWN else size


def collect_small(df, max_rows: int, max_bytes: int, estimate: bool = True,
                  arrival: str | None = None) -> pa.Table | None:
    """`df`'s rows as an Arrow table with the schema a Spark write would see (`spark_to_arrow`), when it has
    at most `max_rows` rows and `max_bytes` bytes in Arrow; else None. `estimate=False` skips step 1, for a
    caller that knows the input has few rows: a join's estimate is the product of its sides' sizes, so a few
    groups folded from joined frames can be estimated at gigabytes. `arrival`: the rows also carry Spark's
    `monotonically_increasing_id()` in a column of that name, the arrival order a de-duplication of `df` in
    Spark would see (the collected order is not that when a limit gathers several partitions)."""
    if max_rows <= 0 or max_bytes <= 0:
        return None
    size = plan_size(df) if estimate else None
    if size is not None and size > max_bytes:
        return None
    src = df.withColumn(arrival, F.monotonically_increasing_id()) if arrival else df
    t, spark_schema = _limited_arrow(src, max_rows + 1)
    if arrival:
        spark_schema = StructType([f for f in spark_schema.fields if f.name != arrival])
        if getattr(src, "_cached_schema", None) is not None and getattr(df, "_cached_schema", False) is None:
            df._cached_schema = spark_schema  # Connect: the reply's schema, so `df` needs no analysis of its own
        t = t.select([c for c in t.column_names if c != arrival] + [arrival])
    if t.num_rows > max_rows or t.nbytes > max_bytes:
        return None
    schema = spark_to_arrow(spark_schema)
    if arrival:
        schema = schema.append(pa.field(arrival, pa.int64(), nullable=False))
    # collected types are Spark's Arrow conversion (e.g. the session time zone on timestamps): the write
    # validates and stores what the Spark path would, so the batch takes the schema the Spark path reads
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(t.columns, schema)], schema=schema)


def _limited_arrow(df, n: int):
    """At most `n` rows of `df` as Arrow (what `toArrow` gives), and `df`'s Spark schema. Spark Connect's
    `toArrow` analyses a frame whose schema it does not know first, a round trip of its own; the execution's
    reply carries the schema anyway, so it is taken from there and kept on `df` for its later uses."""
    lim = df.limit(n)
    if is_connect(df.sparkSession) and getattr(df, "_cached_schema", False) is None and hasattr(lim, "_to_table"):
        raw, schema = lim._to_table()
        if schema is not None:
            df._cached_schema = schema
            return raw.cast(to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True,
                                            timezone="UTC")), schema
    return lim.toArrow(), df.schema
