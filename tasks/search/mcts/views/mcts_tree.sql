with steps as (
    select
        run_id,
        question_id,
        node_id,
        depth,
        path,
        kind,
        json_extract_string(parsed, '$.content') as content,
        visits,
        value,
        reward,
        is_selected,
        is_format_error
    from nodes
    where strategy = 'mcts' and kind <> 'question'
),
pairs as (
    select
        p.run_id,
        p.question_id,
        c.depth,
        list(struct_pack(stage := p.decision, gap := p.gap, chosen := c.path, rejected := r.path)
             order by c.path, r.path) as pairs
    from preference_pairs p
    join steps c on c.run_id = p.run_id and c.node_id = p.chosen_node_id
    join steps r on r.run_id = p.run_id and r.node_id = p.rejected_node_id
    where p.strategy = 'mcts'
    group by all
),
layers as (
    select
        run_id,
        question_id,
        depth,
        count(*) as n_steps,
        count(*) filter (where is_selected) as n_kept,
        count(*) filter (where kind = 'answer') as n_answers,
        count(*) filter (where is_format_error) as n_format_errors,
        sum(visits)::bigint as visits,
        max(value) as max_value,
        list(
            struct_pack(path := path, kind := kind, content := content, n := visits, q := value,
                        reward := reward, kept := is_selected, format_error := is_format_error)
            order by path
        ) as nodes
    from steps
    group by all
)
select
    l.*,
    coalesce(len(p.pairs), 0) as n_pairs,
    coalesce(p.pairs, []) as pairs
from layers l
left join pairs p using (run_id, question_id, depth)
order by run_id, question_id, depth
