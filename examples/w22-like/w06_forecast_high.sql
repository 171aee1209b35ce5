-- TPC-H Q6 shape: revenue of discounts between 0.00 and 0.10, quantity under 51, in year ${year}
select sum(l_extendedprice * l_discount) as revenue
from lineitem
where l_shipdate >= date '${year}-01-01' and l_shipdate < date '${year}-01-01' + interval '1' year
  and l_discount between 0.00 and 0.10 and l_quantity < 51
