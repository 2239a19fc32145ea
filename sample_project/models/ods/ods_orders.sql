{#-
  ODS: the current state of every order, upserted from the change events of each batch (one commit per run).
  - unique_key: one row per order (the Hudi record key); partitioned by the order's date
  - precombine_field: the event sequence decides; duplicates inside a batch collapse to the newest event, and a
    late (replayed) event older than the stored one never overwrites it
  - delete_condition: 'd' events delete the order
  - optimistic concurrency: other writers (run_sample.py's late ingestion job) may commit at the same time
-#}
{{ config(
    materialized='incremental',
    unique_key='order_id',
    precombine_field='event_seq',
    delete_condition="op = 'd'",
    partition_by='order_date',
    options={'hoodie.write.concurrency.mode': 'optimistic_concurrency_control'},
) }}

select order_id, customer_id, status, amount, order_date, created_at, changed_at, event_seq, op
from {{ ref('order_events') }}
where batch = {{ var('batch') }}
