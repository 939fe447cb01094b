-- One build's search behaviour per strategy, over its trajectories (search_behaviour's leaves).
select
    strategy,
    count(*) as trajectories,
    count(gold_recall) as with_gold,
    round(avg(gold_recall), 3) as mean_gold_recall,
    count(*) filter (where gold_recall = 1) as full_recall,
    round(avg(n_searches), 2) as mean_searches,
    count(*) filter (where searches_vs_hops = 'over') as over_search,
    count(*) filter (where searches_vs_hops = 'equal') as equal_search,
    count(*) filter (where searches_vs_hops = 'under') as under_search,
    count(*) filter (where repeated_queries > 0) as with_repeated_query
from search_behaviour
where run_id = $run and is_leaf
group by strategy
order by strategy
