-- The questions a build expanded, per strategy, with the size of each tree.
with trees as (
    select
        strategy,
        question_id,
        count(*) as n_nodes,
        count(*) filter (where is_format_error) as n_format_errors,
        count(*) filter (where not is_selected) as n_pruned
    from nodes
    where run_id = $run
    group by strategy, question_id
)
select trees.*, questions.question
from trees
left join questions using (question_id)
order by strategy, question_id
