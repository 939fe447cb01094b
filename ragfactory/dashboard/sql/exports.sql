-- Rows each build exported, per export table.
with counted as (
    select run_id, 'sft_examples' as export_table, count(*) as n from sft_examples group by run_id
    union all
    select run_id, 'preference_pairs', count(*) from preference_pairs group by run_id
    union all
    select run_id, 'grpo_prompts', count(*) from grpo_prompts group by run_id
    union all
    select run_id, 'trajectories', count(*) from trajectories group by run_id
    union all
    select run_id, 'step_labels', count(*) from step_labels group by run_id
    union all
    select run_id, 'verl_prompts', count(*) from verl_prompts group by run_id
)
select run_id, export_table, n from counted order by run_id, export_table
