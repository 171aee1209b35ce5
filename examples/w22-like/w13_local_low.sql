-- TPC-H Q5 shape: revenue through local suppliers of one region, over 1 month from 1992-01-01
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = '${region}'
  and o_orderdate >= date '1992-01-01' and o_orderdate < date '1992-01-01' + interval '1 month'
group by n_name
order by revenue desc, n_name
