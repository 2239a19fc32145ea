{#- ADS: orders per creation hour and status, maintained from dwd_orders' changes (materialized='aggregate'):
    new orders add, status changes move an order from one group to another, deleted orders retract; min/max are
    recomputed only for groups that lost their extreme, count(distinct) folds a per-group multiset of values.
    Stored merge-on-read: each run's group updates land in log files; the catalog entry reads merged rows. -#}
{{ config(materialized='aggregate', table_type='mor') }}

select order_date, order_hour, status,
       count(*) as orders,
       sum(amount) as revenue,
       avg(amount) as avg_amount,
       min(amount) as min_amount,
       max(amount) as max_amount,
       count(distinct customer_id) as customers
from {{ ref('dwd_orders') }}
group by order_date, order_hour, status
