-- the calls behind the strategy's nodes, one row per call (several shards may copy one call)
with wanted as (
    select distinct llm_call_id as call_id from nodes
    where run_id = $run_id and strategy = $strategy and llm_call_id is not null
)
select llm_calls.* from llm_calls join wanted using (call_id)
where run_id = $run_id
qualify row_number() over (partition by call_id order by created_at) = 1
