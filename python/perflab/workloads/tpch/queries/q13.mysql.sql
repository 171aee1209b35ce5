-- TPC-H Q13, Customer Distribution (spec 2.4.13), in MySQL's dialect: the
-- derived table's columns named in its select list (MariaDB 10.11 takes no
-- column list after a derived table's alias).
select
    c_count,
    count(*) as custdist
from
    (
        select
            c_custkey,
            count(o_orderkey) as c_count
        from
            customer left outer join orders on
                c_custkey = o_custkey
                and o_comment not like '%${WORD1}%${WORD2}%'
        group by
            c_custkey
    ) as c_orders
group by
    c_count
order by
    custdist desc,
    c_count desc
