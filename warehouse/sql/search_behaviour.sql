-- Search behaviour per step node (docs/labels.md, "Search behaviour"): the searches on the path
-- from the root to the node, itself included, so a leaf's row is its whole trajectory's. A search
-- is a step whose parsed output names a query ($.query, or action 'query' with $.content) and
-- that the ledger (retrievals) answered; its titles are those the ledger returned for the query.
--   gold_recall       gold titles those searches returned / the question's gold titles
--   hops              the question's gold titles (HotpotQA 2, 2Wiki 2-4, MuSiQue 2-4)
--   searches_vs_hops  'over' (more searches than hops), 'under' or 'equal'; null without gold
--   repeated_queries  searches whose normalised query (lower case, letters and digits) an
--                     earlier search on the path already asked
with gold as (
    select question_id, count(*) as hops from gold_paragraphs group by question_id
), steps as (
    select run_id, strategy, question_id, node_id, path, depth, kind, is_leaf,
           case when not coalesce(is_format_error, false) and json_valid(parsed) then coalesce(
               json_extract_string(parsed, '$.query'),
               case when json_extract_string(parsed, '$.action') = 'query' then json_extract_string(parsed, '$.content') end
           ) end as query
    from nodes
    where parent_id is not null
), answered as (
    select run_id, question_id, query, flatten(list(titles)) as titles
    from retrievals
    where question_id is not null
    group by run_id, question_id, query
), searches as (
    select s.run_id, s.strategy, s.question_id, s.node_id, s.path, a.titles,
           nullif(trim(regexp_replace(lower(s.query), '[^\pL\pN]+', ' ', 'g')), '') as normalised
    from steps s
    join answered a on a.run_id = s.run_id and a.question_id = s.question_id and a.query = s.query
), on_path as (
    select s.run_id, s.node_id, a.node_id as search_id, a.normalised, a.titles
    from steps s
    join searches a
        on a.run_id = s.run_id and a.strategy = s.strategy and a.question_id = s.question_id
        and (a.path = s.path or starts_with(s.path, a.path || '/'))
), counted as (
    select run_id, node_id, count(*) as n_searches, count(*) - count(distinct normalised) as repeated_queries
    from on_path
    group by run_id, node_id
), found as (
    select o.run_id, o.node_id, count(distinct g.title) as gold_found
    from (select run_id, node_id, question_id, unnest(titles) as title
          from on_path join steps using (run_id, node_id)) o
    join gold_paragraphs g on g.question_id = o.question_id and g.title = lower(trim(o.title, ' "'))
    group by o.run_id, o.node_id
)
select
    s.run_id, s.strategy, s.question_id, s.node_id, s.path, s.depth, s.kind,
    coalesce(s.is_leaf, false) as is_leaf,
    s.query is not null and s.node_id in (select node_id from searches) as is_search,
    coalesce(c.n_searches, 0) as n_searches,
    coalesce(c.repeated_queries, 0) as repeated_queries,
    gold.hops,
    coalesce(f.gold_found, 0) as gold_found,
    case when gold.hops > 0 then coalesce(f.gold_found, 0) / gold.hops end as gold_recall,
    case
        when gold.hops is null then null
        when coalesce(c.n_searches, 0) > gold.hops then 'over'
        when coalesce(c.n_searches, 0) < gold.hops then 'under'
        else 'equal'
    end as searches_vs_hops
from steps s
left join gold using (question_id)
left join counted c using (run_id, node_id)
left join found f using (run_id, node_id)
order by s.run_id, s.strategy, s.question_id, s.path
