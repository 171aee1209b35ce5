-- TPC-H Q10 shape: customers who returned items ordered within 1 year from 1993-01-01
select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue, n_name
from customer, orders, lineitem, nation
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_returnflag = 'R' and c_nationkey = n_nationkey
  and o_orderdate >= date '1993-01-01' and o_orderdate < date '1993-01-01' + interval '1 year'
group by c_custkey, c_name, n_name
order by revenue desc, c_custkey
limit 20
