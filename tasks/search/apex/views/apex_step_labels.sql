-- APEX-Searcher's plan labels as long rows (step_labels_all, docs/labels.md): a plan node's SEPR
-- F1 against the gold decomposition (§2.2.1), and each executed sub-question's SEPR match, the
-- similarity of the gold step Hungarian matching paired it with (0 when it matched none). A
-- fallback execution (the question itself, after no plan parsed) runs no planned step and gets none.
with scored_plans as (
    select n.run_id, n.strategy, n.question_id, n.node_id, n.path, s.f1, s.matched
    from nodes n
    join plan_scores s on s.run_id = n.run_id and s.plan_id = n.node_id
    where n.strategy = 'apex' and n.kind = 'plan'
      and coalesce(json_extract_string(n.parsed, '$.fallback') = 'true', false) = false
), sub_questions as (
    select q.run_id, q.strategy, q.question_id, q.node_id,
           coalesce(list_max(list_transform(
               list_filter(p.matched, lambda m: m.predicted = cast(json_extract(q.parsed, '$.step') as integer)),
               lambda m: m.similarity)), 0) :: double as similarity
    from nodes q
    join scored_plans p on p.run_id = q.run_id and p.question_id = q.question_id and starts_with(q.path, p.path || '/')
    where q.strategy = 'apex' and q.kind = 'sub_question'
)
select run_id, strategy, question_id, node_id, 'sepr_f1' as source, f1 as value, '[0,1]' as scale
from scored_plans where f1 is not null
union all
select run_id, strategy, question_id, node_id, 'sepr_match', similarity, '[0,1]'
from sub_questions
