select order_id, customer_id, amount, cast(ordered_at as date) as order_date
from {{ ref('orders') }}
where amount > 0
