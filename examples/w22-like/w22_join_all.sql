-- the whole fact join: every line with its order (the heaviest, selectivity 100%)
select o_orderstatus, count(*) as lines, sum(l_extendedprice) as value
from orders, lineitem
where l_orderkey = o_orderkey
group by o_orderstatus
order by o_orderstatus
