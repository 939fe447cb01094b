-- Evaluation means per model, dataset and mode (the eval_summary view), base and trained alike.
select model_id, dataset, mode, partition, n_questions, em, f1, cover_em, n_seen
from eval_summary
order by dataset, mode, model_id
