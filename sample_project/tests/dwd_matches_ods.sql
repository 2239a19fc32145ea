-- Singular test: every live ODS order is in the DWD table with the same status and amount, and nothing else.
select coalesce(o.order_id, d.order_id) as order_id
from {{ ref('ods_orders') }} o
full outer join {{ ref('dwd_orders') }} d on o.order_id = d.order_id
where o.order_id is null or d.order_id is null
   or upper(o.status) != d.status or o.amount != d.amount
