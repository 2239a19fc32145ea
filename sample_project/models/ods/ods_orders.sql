{#-
  ODS: the current state of every order, kept up to date from the change events of each batch.
  - unique_key: one row per order (the Hudi record key)
  - precombine_field: the event sequence decides; duplicates inside a batch collapse to the newest event, and a
    late (replayed) event older than the stored one never overwrites it
  - delete_condition: 'd' events delete the order
  Each run is ONE hudilite commit (upsert); the run reports rows inserted / updated / deleted.
-#}
{{ config(
    materialized='incremental',
    unique_key='order_id',
    precombine_field='event_seq',
    delete_condition="op = 'd'",
) }}

select order_id, customer_id, status, amount, changed_at, event_seq, op
from {{ ref('order_events') }}
where batch = {{ var('batch') }}
