{#- ADS: paid / shipped business per day and country (a filtered aggregate, maintained incrementally). -#}
{{ config(materialized='aggregate') }}

select order_date, country,
       count(*) as orders,
       sum(amount) as revenue,
       max(amount) as largest_order,
       count(distinct customer_id) as customers
from {{ ref('dwd_orders') }}
where status <> 'PENDING'
group by order_date, country
