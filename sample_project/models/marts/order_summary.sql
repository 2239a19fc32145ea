-- A small mart: rebuilt on every run as one insert_overwrite_table commit (the previous version stays
-- readable until the new one is committed).
{{ config(materialized='table') }}

select status, count(*) as orders, sum(amount) as revenue
from {{ ref('dwd_orders') }}
group by status
