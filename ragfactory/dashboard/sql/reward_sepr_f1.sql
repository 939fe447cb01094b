-- Scored plans' SEPR F1 against the gold decomposition, at the depth of the plan node (a plan's
-- plan_id is its node_id, whose strategy planned it).
select n.strategy, n.depth, o.outcome, s.f1 as value
from plan_scores s
left join nodes n on n.run_id = s.run_id and n.node_id = s.plan_id
left join outcomes o on o.strategy = n.strategy and o.question_id = s.question_id
where s.run_id = $run and s.f1 is not null
