{#-
  DWD: cleaned, enriched orders, kept as an incremental upsert of the ODS table's CHANGES.
  `hudilite.changes(ref('ods_orders'))` reads every ODS record committed after this model's checkpoint, up to
  the ODS's newest commit when this model starts — exactly once: the checkpoint is stored in the commit that
  writes this table, ranges follow completion order (a late ODS commit that started earlier is still read), and
  a failed run consumes nothing. First run / --full-refresh: the whole ODS snapshot.
  Orders deleted in the ODS arrive with _change_op = 'D' and become deletes here (_hoodie_is_deleted).
  `--vars '{fail_dwd: true}'` makes the run fail while writing (run_sample.py's failure drill).
-#}
{{ config(materialized='incremental', unique_key='order_id', partition_by='order_date') }}

select
    o.order_id,
    o.customer_id,
    c.customer_name,
    c.country,
    upper(o.status) as status,
    o.amount,
    o.order_date,
    date_trunc('hour', o.created_at) as order_hour,
    o.event_seq,
    o._change_op = 'D' as _hoodie_is_deleted
from {{ hudilite.changes(ref('ods_orders')) }} o
left join {{ ref('customers') }} c on o.customer_id = c.customer_id
where ({{ var('fail_dwd', false) }} = false or raise_error('injected failure: dwd_orders fails while writing') is null)
