-- Node values: DecEx-RAG rollout means (Eq. 1), TreePS-RAG and ReasonRAG backed-up values, APEX-Searcher answers.
select n.strategy, n.depth, o.outcome, n.value
from nodes n
join outcomes o on o.strategy = n.strategy and o.question_id = n.question_id
where n.run_id = $run and n.value is not null
