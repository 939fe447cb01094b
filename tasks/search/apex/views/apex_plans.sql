with plan_rows as (
    select
        run_id,
        question_id,
        plan_id,
        source,
        len(steps) as n_steps,
        list_transform(steps, lambda s: s.question) as sub_questions,
        is_format_error,
        format_error
    from plans
), plan_nodes as (
    select
        node_id as plan_id,
        run_id,
        question_id,
        path,
        is_selected as is_executed,
        coalesce(json_extract_string(parsed, '$.fallback') = 'true', false) as is_fallback
    from nodes
    where strategy = 'apex' and kind = 'plan'
), executions as (
    select
        plan_nodes.plan_id,
        count(*) filter (where run.kind = 'sub_question') as n_sub_questions,
        count(*) filter (where run.kind = 'sub_query') as n_queries,
        count(*) filter (where run.is_format_error) as n_format_errors,
        max(json_extract_string(run.parsed, '$.answer')) filter (where run.kind = 'answer') as final_answer,
        max(run.reward) filter (where run.kind = 'answer') as answer_reward,
        max(cast(json_extract(run.parsed, '$.em') as double)) filter (where run.kind = 'answer') as answer_em,
        max(cast(json_extract(run.parsed, '$.f1') as double)) filter (where run.kind = 'answer') as answer_f1,
        max(cast(json_extract(run.parsed, '$.confidence') as double)) filter (where run.kind = 'answer') as confidence
    from plan_nodes
    join nodes as run
        on run.run_id = plan_nodes.run_id
        and run.question_id = plan_nodes.question_id
        and run.strategy = 'apex'
        and starts_with(run.path, plan_nodes.path || '/')
    group by plan_nodes.plan_id
)
select
    plan_rows.*,
    plan_scores.precision,
    plan_scores.recall,
    plan_scores.f1,
    plan_scores.tau,
    len(plan_scores.matched) as n_matched,
    plan_scores.matched,
    plan_scores.embedder,
    coalesce(plan_nodes.is_executed, false) as is_executed,
    coalesce(plan_nodes.is_fallback, false) as is_fallback,
    coalesce(executions.n_sub_questions, 0) as n_sub_questions,
    coalesce(executions.n_queries, 0) as n_queries,
    coalesce(executions.n_format_errors, 0) as n_execution_format_errors,
    executions.final_answer,
    executions.answer_reward,
    executions.answer_em,
    executions.answer_f1,
    executions.confidence
from plan_rows
left join plan_scores
    on plan_scores.plan_id = plan_rows.plan_id
    and plan_scores.run_id = plan_rows.run_id
left join plan_nodes
    on plan_nodes.plan_id = plan_rows.plan_id
left join executions
    on executions.plan_id = plan_rows.plan_id
order by plan_rows.run_id, plan_rows.question_id, plan_nodes.path, plan_rows.plan_id
