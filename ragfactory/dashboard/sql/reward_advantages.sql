-- Advantages: a node's value minus its parent's (TreePS-RAG's process signal).
select n.strategy, n.depth, o.outcome, n.advantage as value
from nodes n
join outcomes o on o.strategy = n.strategy and o.question_id = n.question_id
where n.run_id = $run and n.advantage is not null
