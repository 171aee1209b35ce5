-- TPC-H Q2/Q9 shape: supply cost and profit of the parts where p_size > 0
select n_name, count(*) as lines, sum(l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity) as profit
from part, partsupp, lineitem, supplier, nation
where p_size > 0 and ps_partkey = p_partkey and l_partkey = p_partkey and l_suppkey = ps_suppkey
  and s_suppkey = ps_suppkey and s_nationkey = n_nationkey
group by n_name
order by n_name
