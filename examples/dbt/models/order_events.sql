-- Every change to the orders since the last run, once: the INSERT that appends them consumes
-- the stream in the same commit (a failed run consumes nothing).
-- depends_on: {{ ref('orders') }}
{{ config(materialized='incremental') }}
select order_id, amount, METADATA$ACTION as action, current_timestamp() as seen_at
from {{ target.schema }}.orders_stream
