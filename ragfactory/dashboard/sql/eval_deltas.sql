-- Per-question F1 of a trained model minus its base model's, on the questions both answered
-- (per dataset and mode; a question evaluated twice counts at its mean).
with
trained as (
    select dataset, mode, question_id, avg(f1) as f1 from evals where model_id = $model group by all
),
base as (
    select e.dataset, e.mode, e.question_id, avg(e.f1) as f1
    from evals e join models m on e.model_id = m.base_model
    where m.model_id = $model
    group by all
)
select t.dataset, t.mode, t.question_id, t.f1 - b.f1 as delta
from trained t join base b using (dataset, mode, question_id)
order by t.dataset, t.mode, delta, t.question_id
