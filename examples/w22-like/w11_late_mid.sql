-- TPC-H Q4 shape: orders with a late line, in a window of 2 year from 1992-01-01
select o_orderpriority, count(*) as order_count
from orders
where o_orderdate >= date '1992-01-01' and o_orderdate < date '1992-01-01' + interval '2 year'
  and exists (select 1 from lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority
order by o_orderpriority
