with recorded as (
    select model_id, unnest(question_ids) as question_id
    from models
    where question_ids is not null
), unrecorded as (
    select
        model_id,
        json_extract_string(lineage, '$.run_id') as run_id,
        json_extract_string(lineage, '$.table') as export_table
    from models
    where question_ids is null
), exported as (
    select run_id, 'sft_examples' as export_table, question_id from sft_examples
    union all
    select run_id, 'preference_pairs', question_id from preference_pairs
    union all
    select run_id, 'grpo_prompts', question_id from grpo_prompts
), derived as (
    select unrecorded.model_id, exported.question_id
    from unrecorded
    join exported using (run_id, export_table)
), seen as (
    select model_id, question_id, 'recorded' as lineage_source from recorded
    union all
    select model_id, question_id, 'derived' from derived
)
select distinct model_id, question_id, lineage_source
from seen
where question_id is not null
order by model_id, question_id
