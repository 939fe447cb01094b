-- Leaf rewards: each leaf's outcome score (the build's answer metric).
select n.strategy, n.depth, o.outcome, n.reward as value
from nodes n
join outcomes o on o.strategy = n.strategy and o.question_id = n.question_id
where n.run_id = $run and n.is_leaf and n.reward is not null
