-- The promoted model after each night of each pipeline, with its mean score on the pipeline's
-- metric and mode over every question it was evaluated on, on valid (what promotion reads) and on
-- test (what the night reports): the points of the Flywheel page's plot. Each pipeline's line
-- starts at the model its first night started from (night 'start', its first incumbent), so the
-- plot shows what the nights gained over it.
with scores as (
    select model_id, mode, partition, avg(em) as em, avg(f1) as f1, avg(cover_em) as cover_em, count(*) as n
    from evals
    group by model_id, mode, partition
),
points as (
    select pipeline, night, created_at, promoted, metric, mode
    from promotions
    union all
    select
        pipeline,
        'start',
        min(created_at) - interval 1 second,
        arg_min(incumbent, created_at),
        arg_min(metric, created_at),
        arg_min(mode, created_at)
    from promotions
    group by pipeline
),
nights as (
    select
        p.pipeline,
        p.night,
        p.created_at,
        p.promoted,
        p.metric,
        s.partition,
        s.n,
        case p.metric when 'em' then s.em when 'f1' then s.f1 when 'cover_em' then s.cover_em end as score
    from points p
    left join scores s on s.model_id = p.promoted and s.mode = p.mode
)
select
    pipeline,
    night,
    any_value(promoted) as promoted,
    any_value(metric) as metric,
    max(score) filter (where partition = 'valid') as valid,
    max(n) filter (where partition = 'valid') as n_valid,
    max(score) filter (where partition = 'test') as test,
    max(n) filter (where partition = 'test') as n_test
from nights
group by pipeline, night, created_at
order by pipeline, created_at
