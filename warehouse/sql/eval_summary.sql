with scored as (
    select
        model_id,
        dataset,
        mode,
        run_id,
        partition,
        cast(em as double) as em,
        cast(f1 as double) as f1,
        cast(cover_em as double) as cover_em,
        n_retrievals,
        n_steps,
        format_error,
        is_seen
    from evals
)
select
    model_id,
    dataset,
    mode,
    run_id,
    partition,
    count(*) as n_questions,
    avg(em) as em,
    avg(f1) as f1,
    avg(cover_em) as cover_em,
    avg(n_retrievals) as avg_retrievals,
    avg(n_steps) as avg_steps,
    count(*) filter (where format_error is not null) as n_format_errors,
    count(*) filter (where is_seen) as n_seen
from scored
group by model_id, dataset, mode, run_id, partition
order by dataset, mode, model_id, run_id
