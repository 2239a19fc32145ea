"""Aggregate tables maintained from their detail table's changes, from PySpark (the dbt `aggregate`
materialization runs the same engine):

    from hudilite import aggregate
    q = aggregate.parse("select g, count(*) as n, sum(x) as s from detail group by g")
    aggregate.refresh(spark, q, "/data/detail", "/data/detail_by_g")

The first refresh computes the aggregate in full from the detail snapshot; later ones read the detail's
changes since the checkpoint with before images: inserted rows add (+1), the before image of an updated row
retracts (-1) and its new image adds (+1), deleted rows retract; the WHERE applies to each image. The result
is ONE upsert commit keyed by the group keys (`_hudilite_group_key`) carrying the checkpoint.

Modules: `query` (the SQL accepted, its signature), `spark` (the engine on Spark), `local` (the same fold on
the driver with pyarrow for small ranges), `where` (a WHERE clause as a pyarrow filter, for `local`),
`state` (value multisets for min / max / count(distinct)),
`maintain` (`refresh`: choosing and committing a full build or a fold).
"""

from hudilite.aggregate.local import full_state, incremental_arrow
from hudilite.aggregate.maintain import refresh, session_time_zone, stored_signature, write_options
from hudilite.aggregate.query import GROUP_KEY, ROWS, SIGNATURE_KEY, AggregateQuery, AggregateQueryError, Item, parse
from hudilite.aggregate.spark import full_frame, incremental_frame

__all__ = ["GROUP_KEY", "ROWS", "SIGNATURE_KEY", "AggregateQuery", "AggregateQueryError", "Item", "full_frame",
           "full_state", "incremental_arrow", "incremental_frame", "parse", "refresh", "session_time_zone",
           "stored_signature", "write_options"]
