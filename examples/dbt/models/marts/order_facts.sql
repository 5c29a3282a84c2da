{{ config(materialized='dynamic_table', target_lag='downstream') }}
select o.order_id, o.order_date, o.amount, c.name, c.country
from {{ ref('stg_orders') }} as o
join {{ ref('stg_customers') }} as c on o.customer_id = c.customer_id
