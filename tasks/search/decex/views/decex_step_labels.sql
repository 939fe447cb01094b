-- DecEx-RAG's process label as long rows (step_labels_all, docs/labels.md): each step's
-- Monte-Carlo value, the mean outcome of the rollouts completed from it (DecEx-RAG §2.2); an
-- answer leaf's value is its own outcome.
with steps as (
    select run_id, strategy, question_id, node_id, value
    from nodes
    where strategy in ('decex', 'decex_no_pruning') and parent_id is not null and value is not null
)
select run_id, strategy, question_id, node_id, 'mc_value' as source, value, '[0,1]' as scale
from steps
