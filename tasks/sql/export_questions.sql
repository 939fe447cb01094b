with wanted as (
    select distinct question_id from nodes where run_id = $run_id and strategy = $strategy
)
select questions.* from questions join wanted using (question_id)
