{{ config(materialized='dynamic_table', target_lag='1 minute', refresh_mode='INCREMENTAL') }}
select country, count(*) as orders, sum(amount) as revenue
from {{ ref('order_facts') }}
group by country
