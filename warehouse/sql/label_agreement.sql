-- How far the process labels agree (docs/labels.md, "Label agreement"): for each run x strategy
-- and each pair of sources in step_labels_all, over the step nodes both label, Spearman's rho and
-- Kendall's tau-b; gold_support (a step's gold_recall in search_behaviour, on questions with
-- gold paragraphs) is one more source, so every label is also read against the gold evidence.
--   rho    Pearson's r of the two sources' ranks, tied values sharing their average rank
--          (rank() gives ties the lowest one, so the average adds (ties - 1) / 2)
--   tau_b  (concordant - discordant) / sqrt((n0 - ties_a) (n0 - ties_b)) over the n0 node pairs,
--          counted over cells of equal values rather than node by node
-- Both are null where a source is constant over the shared nodes (no ranking to compare).
with labels as (
    select run_id, strategy, node_id, source, avg(value) as value
    from step_labels_all
    where value is not null and not isnan(value)
    group by all
    union all
    select run_id, strategy, node_id, 'gold_support', gold_recall
    from search_behaviour
    where gold_recall is not null
), pairs as (
    select a.run_id, a.strategy, a.source as source_a, b.source as source_b, a.node_id, a.value as x, b.value as y
    from labels a
    join labels b on b.run_id = a.run_id and b.strategy = a.strategy and b.node_id = a.node_id and a.source < b.source
), ranked as (
    select *,
           rank() over (partition by run_id, strategy, source_a, source_b order by x)
               + (count(*) over (partition by run_id, strategy, source_a, source_b, x) - 1) / 2 as rank_x,
           rank() over (partition by run_id, strategy, source_a, source_b order by y)
               + (count(*) over (partition by run_id, strategy, source_a, source_b, y) - 1) / 2 as rank_y
    from pairs
), spearman as (
    select run_id, strategy, source_a, source_b, count(*) as n_nodes, count(*) * (count(*) - 1) / 2 as n0,
           case when var_pop(rank_x) > 0 and var_pop(rank_y) > 0 then corr(rank_x, rank_y) end as rho
    from ranked
    group by all
), cells as (
    -- nodes with the same pair of values, counted: labels take few distinct values (MC values are
    -- fractions of rollouts, relevance tenths, format 0 or 1), so pairs of cells stay few where
    -- pairs of nodes would grow with the square of the run's steps
    select run_id, strategy, source_a, source_b, x, y, count(*) as c
    from pairs
    group by all
), kendall as (
    -- every ordered pair of cells: a cell with itself adds 0, each unordered pair counts twice
    select p.run_id, p.strategy, p.source_a, p.source_b,
           sum(p.c * q.c * sign(p.x - q.x) * sign(p.y - q.y)) / 2 as concordance
    from cells p
    join cells q using (run_id, strategy, source_a, source_b)
    group by all
), tied_x as (
    select run_id, strategy, source_a, source_b, sum(c * (c - 1) / 2) as ties_a
    from (select run_id, strategy, source_a, source_b, x, count(*) as c from pairs group by all)
    group by all
), tied_y as (
    select run_id, strategy, source_a, source_b, sum(c * (c - 1) / 2) as ties_b
    from (select run_id, strategy, source_a, source_b, y, count(*) as c from pairs group by all)
    group by all
)
select
    s.run_id, s.strategy, s.source_a, s.source_b,
    'gold_support' in (s.source_a, s.source_b) as against_gold,
    s.n_nodes,
    s.rho,
    case when s.n0 > a.ties_a and s.n0 > b.ties_b
         then k.concordance / sqrt((s.n0 - a.ties_a) * (s.n0 - b.ties_b)) end as tau_b
from spearman s
join kendall k using (run_id, strategy, source_a, source_b)
join tied_x a using (run_id, strategy, source_a, source_b)
join tied_y b using (run_id, strategy, source_a, source_b)
order by s.run_id, s.strategy, s.source_a, s.source_b
