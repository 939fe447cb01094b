-- Preference pairs' value gaps, at the depth of the chosen step.
select p.strategy, c.depth, o.outcome, p.gap as value
from preference_pairs p
left join nodes c on c.run_id = p.run_id and c.node_id = p.chosen_node_id
left join outcomes o on o.strategy = p.strategy and o.question_id = p.question_id
where p.run_id = $run and p.gap is not null
