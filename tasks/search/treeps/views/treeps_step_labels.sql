-- TreePS-RAG's process labels as long rows (step_labels_all, docs/labels.md): a node's value, the
-- mean outcome of the leaves below it (Monte-Carlo estimate, Eq. 2), and its advantage, that
-- value minus its parent's (Eq. 3).
with steps as (
    select run_id, strategy, question_id, node_id, value, advantage
    from nodes
    where strategy = 'treeps' and parent_id is not null
)
select run_id, strategy, question_id, node_id, 'mc_value' as source, value, '[0,1]' as scale
from steps where value is not null
union all
select run_id, strategy, question_id, node_id, 'advantage', advantage, '[-1,1]'
from steps where advantage is not null
