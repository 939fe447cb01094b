-- R3-RAG's process labels as long rows (step_labels_all, docs/labels.md): the judge's relevance
-- of a search's documents to the question (Eq. 3; a verdict that did not read is left out, not
-- read as 0) and the step's process reward scaled by its trajectory's λ_T (Eq. 4).
with judged as (
    select run_id, strategy, question_id, node_id, name, value, scaled, coalesce(is_format_error, false) as unread
    from rewards
    where strategy = 'r3' and node_id is not null
)
select run_id, strategy, question_id, node_id, 'relevance' as source, value, '[0,1]' as scale
from judged where name = 'relevance' and not unread and value is not null
union all
select run_id, strategy, question_id, node_id, 'scaled_process', scaled, '[-1,1]'
from judged where name = 'process' and scaled is not null
