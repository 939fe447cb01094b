-- Every build, newest first, with its LLM samples: fresh ones and those answered from the call
-- cache (a cache hit keeps the created_at of the run that first made it, tasks/llm/cache.py).
-- runs.* rather than named columns: a warehouse written before runs.flow_run_id has none.
with calls as (
    select
        llm_calls.run_id,
        count(*) as n_llm_calls,
        count(*) filter (where llm_calls.created_at < runs.started_at) as n_cache_hits
    from llm_calls
    join runs using (run_id)
    group by llm_calls.run_id
)
select
    runs.* exclude (config, inputs),
    epoch(runs.finished_at) - epoch(runs.started_at) as duration_s,
    coalesce(calls.n_llm_calls, 0) as n_llm_calls,
    coalesce(calls.n_cache_hits, 0) as n_cache_hits
from runs
left join calls using (run_id)
where runs.flow = 'build'
order by runs.started_at desc
