{#-
  DWD: cleaned, enriched orders. Incremental upsert from the ODS table: only ODS rows committed after this
  table's last run are read (_hoodie_commit_time is the commit that last changed a row), and orders that
  disappeared from the ODS are deleted here too — a `_hoodie_is_deleted` column (the Hudi convention) marks them.
-#}
{{ config(materialized='incremental', unique_key='order_id', precombine_field='event_seq') }}

with changed as (
    select *
    from {{ ref('ods_orders') }}
    {% if is_incremental() %}
    where _hoodie_commit_time > (select coalesce(max(ods_commit_time), '') from {{ this }})
    {% endif %}
)

select
    o.order_id,
    o.customer_id,
    c.customer_name,
    c.country,
    upper(o.status) as status,
    o.amount,
    cast(o.changed_at as date) as order_date,
    o.event_seq,
    o._hoodie_commit_time as ods_commit_time,
    false as _hoodie_is_deleted
from changed o
left join {{ ref('customers') }} c on o.customer_id = c.customer_id

{% if is_incremental() %}
union all
-- orders deleted upstream since the last run
select t.order_id, t.customer_id, t.customer_name, t.country, t.status, t.amount, t.order_date,
       t.event_seq, t.ods_commit_time, true as _hoodie_is_deleted
from {{ this }} t
left anti join {{ ref('ods_orders') }} o on t.order_id = o.order_id
{% endif %}
