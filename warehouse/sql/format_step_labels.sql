-- Every strategy's format label as long rows (step_labels_all, docs/labels.md): 1 when a step's
-- text parsed as its step format, 0 when it was a format error.
with steps as (
    select run_id, strategy, question_id, node_id, is_format_error
    from nodes
    where parent_id is not null and is_format_error is not null
)
select run_id, strategy, question_id, node_id, 'format' as source,
       cast(case when is_format_error then 0 else 1 end as double) as value, '{0,1}' as scale
from steps
