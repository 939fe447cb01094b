with steps as (
    select
        n.run_id,
        n.question_id,
        n.node_id,
        n.path,
        cast(json_extract(n.parsed, '$.attempt') as integer) as attempt,
        cast(json_extract(n.parsed, '$.step') as integer) as step,
        cast(json_extract(n.parsed, '$.temperature') as double) as temperature,
        json_extract_string(n.parsed, '$.outcome') as outcome,
        cast(json_extract(n.parsed, '$.scale') as double) as scale,
        json_extract_string(n.parsed, '$.reason') as reason,
        json_extract_string(n.parsed, '$.action') as action,
        json_extract_string(n.parsed, '$.content') as content,
        n.is_selected,
        n.is_format_error
    from nodes n
    where n.strategy = 'r3' and n.kind <> 'question'
),
step_rewards as (
    select
        run_id,
        node_id,
        max(value) filter (where name = 'relevance') as relevance,
        bool_or(is_format_error) filter (where name = 'relevance') as relevance_unread,
        max(value) filter (where name = 'format') as format,
        max(value) filter (where name = 'process') as process,
        max(scaled) filter (where name = 'process') as scaled_process,
        max(value) filter (where name = 'outcome') as outcome_reward
    from rewards
    where strategy = 'r3'
    group by all
)
select
    s.run_id,
    s.question_id,
    s.attempt,
    any_value(s.temperature) as temperature,
    any_value(s.outcome) as outcome,
    any_value(s.scale) as scale,
    bool_or(s.is_selected) as kept,
    any_value(s.reason) as reason,
    count(*) as n_steps,
    max(r.outcome_reward) as outcome_reward,
    max(s.content) filter (where s.action = 'answer') as answer,
    sum(r.scaled_process) as total_scaled_process,
    list(
        struct_pack(step := s.step, action := s.action, content := s.content, relevance := r.relevance,
                    relevance_unread := r.relevance_unread, format := r.format, process := r.process,
                    scaled := r.scaled_process, format_error := s.is_format_error)
        order by s.step
    ) as steps
from steps s
left join step_rewards r using (run_id, node_id)
group by s.run_id, s.question_id, s.attempt
order by s.run_id, s.question_id, s.attempt
