-- One row per night of each nightly pipeline: the questions its build expanded, the rows it
-- exported, the candidate's training loss, and the candidate against the incumbent on valid.
with expanded as (
    select run_id, count(distinct question_id) as questions from nodes group by run_id
),
sft as (select run_id, count(*) as n from sft_examples group by run_id),
pairs as (select run_id, count(*) as n from preference_pairs group by run_id)
select
    p.pipeline,
    p.night,
    p.build_run_id,
    coalesce(e.questions, 0) as questions,
    coalesce(s.n, 0) as sft_rows,
    coalesce(d.n, 0) as pairs,
    p.candidate,
    p.incumbent,
    try_cast(json_extract(m.metrics, '$.train_loss') as double) as train_loss,
    p.metric,
    p.mode,
    p.n,
    p.delta,
    p.ci_low,
    p.ci_high,
    p.p,
    p.decision,
    p.reason,
    p.promoted
from promotions p
left join expanded e on e.run_id = p.build_run_id
left join sft s on s.run_id = p.build_run_id
left join pairs d on d.run_id = p.build_run_id
left join models m on m.model_id = p.candidate
order by p.pipeline, p.created_at
