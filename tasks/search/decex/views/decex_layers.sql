with branches as (
    select
        run_id,
        question_id,
        strategy,
        cast(json_extract(parsed, '$.layer') as integer) as layer,
        kind,
        path,
        is_selected,
        is_format_error,
        value,
        coalesce(
            json_extract_string(parsed, '$.question'),
            json_extract_string(parsed, '$.answer'),
            json_extract_string(parsed, '$.query'),
            json_extract_string(parsed, '$.decision')
        ) as branch
    from nodes
    where strategy in ('decex', 'decex_no_pruning')
      and kind in ('termination', 'answer', 'sub_question', 'self_answer', 'sub_query')
)
select
    run_id,
    question_id,
    strategy,
    layer,
    kind,
    count(*) filter (where is_selected) as n_kept,
    count(*) filter (where not is_selected) as n_pruned,
    count(*) filter (where is_format_error) as n_format_errors,
    max(value) filter (where is_selected) as kept_value,
    max(value) filter (where not is_selected) as best_pruned_value,
    list(
        struct_pack(path := path, branch := branch, value := value, kept := is_selected)
        order by path
    ) as branches
from branches
group by all
order by run_id, question_id, strategy, layer, kind
