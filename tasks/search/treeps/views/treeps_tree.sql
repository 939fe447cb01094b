with tree as (
    select
        run_id,
        question_id,
        depth,
        path,
        kind,
        is_selected,
        is_leaf,
        reward,
        visits,
        value,
        advantage,
        is_format_error,
        coalesce(json_extract_string(parsed, '$.query'), json_extract_string(parsed, '$.answer')) as action
    from nodes
    where strategy = 'treeps'
)
select
    run_id,
    question_id,
    depth,
    count(*) as n_nodes,
    count(*) filter (where is_selected) as n_kept,
    count(*) filter (where is_leaf and is_selected) as n_leaves,
    avg(value) filter (where is_selected) as mean_value,
    avg(reward) filter (where is_leaf and is_selected) as mean_leaf_reward,
    list(
        struct_pack(path := path, kind := kind, action := action, value := value,
                    advantage := advantage, leaves := visits, reward := reward, kept := is_selected)
        order by path
    ) as nodes
from tree
group by all
order by run_id, question_id, depth
