-- nodes, kept / pruned, format errors and exports per strategy
select * from strategy_summary where run_id = $run_id;

-- the process rewards of one question's tree
select question_id, depth, kind, is_selected, value, reward
from nodes where run_id = $run_id
order by question_id, depth limit 50;

-- preference pairs and their reward margins
select strategy, decision, count(*) as pairs, avg(gap) as mean_gap
from preference_pairs where run_id = $run_id group by all;

-- every engine call, cached or not
select role, count(*) as calls, sum(completion_tokens) as tokens
from llm_calls where run_id = $run_id group by role;
