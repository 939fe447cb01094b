-- One question's tree: every node, its text cut to a label (the whole node is fetched on click).
select
    node_id,
    parent_id,
    depth,
    kind,
    left(coalesce(text, ''), 80) as label,
    is_selected,
    is_format_error,
    is_leaf,
    value,
    advantage,
    visits,
    reward
from nodes
where run_id = $run and strategy = $strategy and question_id = $question
order by depth, path
