select export_table, method, action, count(*) as n_rows, count(distinct question_id) as n_questions
from contamination
where run_id = $run_id
group by 1, 2, 3
order by 1, 2, 3
