with counts as (
    select 'questions' as "table", count(*) as n_rows from questions
    union all select 'passages', count(*) from passages
    union all select 'rejects', count(*) from rejects
    union all select 'runs', count(*) from runs
    union all select 'nodes', count(*) from nodes
    union all select 'rollouts', count(*) from rollouts
    union all select 'llm_calls', count(*) from llm_calls
    union all select 'sft_examples', count(*) from sft_examples
    union all select 'preference_pairs', count(*) from preference_pairs
)
select * from counts
