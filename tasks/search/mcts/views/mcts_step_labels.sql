-- ReasonRAG's process labels as long rows (step_labels_all, docs/labels.md): a step's Q, the
-- mean of the SPRE values backed up through it (Eq. 1), and, where the build valued steps with
-- the process judge (Appendix A, Eq. 6), the judge's own verdict on the step.
with steps as (
    select run_id, strategy, question_id, node_id, value,
           cast(json_extract(parsed, '$.judge_score') as double) as judge_score
    from nodes
    where strategy = 'mcts' and parent_id is not null
)
select run_id, strategy, question_id, node_id, 'spre' as source, value, '[0,1]' as scale
from steps where value is not null
union all
select run_id, strategy, question_id, node_id, 'process_judge', judge_score, '[0,1]'
from steps where judge_score is not null
