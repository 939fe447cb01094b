-- per question, the mean of one metric column of evals: tasks/nightly.py writes the column's name
-- in for {metric}, one of tasks/eval/promotion.py's METRICS
select question_id, avg({metric}) as score from evals
where run_id = $run_id and mode = $mode and {metric} is not null
group by question_id
