{#-
  DWD: cleaned, enriched orders, kept as an incremental upsert from the ODS table.
  Each run reads only the ODS orders that changed since the DWD's last run — an order whose (order_id,
  event_seq) is not in this table yet — and deletes orders that disappeared from the ODS: those rows carry
  `_hoodie_is_deleted = true` (Hudi's delete-marker column; hudilite turns them into deletes and never shows
  the column).
-#}
{{ config(materialized='incremental', unique_key='order_id', precombine_field='event_seq') }}

with changed as (
    select o.*
    from {{ ref('ods_orders') }} o
    {% if is_incremental() %}
    left anti join {{ this }} t on o.order_id = t.order_id and o.event_seq = t.event_seq
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
    false as _hoodie_is_deleted
from changed o
left join {{ ref('customers') }} c on o.customer_id = c.customer_id

{% if is_incremental() %}
union all
-- orders deleted upstream since the last run
select t.order_id, t.customer_id, t.customer_name, t.country, t.status, t.amount, t.order_date, t.event_seq,
       true as _hoodie_is_deleted
from {{ this }} t
left anti join {{ ref('ods_orders') }} o on t.order_id = o.order_id
{% endif %}
