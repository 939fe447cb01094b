with run_nodes as (
    select * from nodes where run_id = $run_id and strategy = $strategy
)
select * from run_nodes order by question_id, path
