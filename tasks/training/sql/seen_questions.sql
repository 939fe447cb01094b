with named as (
    select model_id from models where model_id = $model or path = $model
)
select distinct question_id from model_questions join named using (model_id)
order by question_id
