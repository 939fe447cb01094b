-- What each run x strategy cost and what it kept (docs/ledger.md). Engine time is the union of
-- the generated calls' intervals [created_at - latency_s, created_at]: calls in one batch, or in
-- flight together, overlap, so the sum of their latencies overstates the wall time. Samples
-- another run generated (cached) cost nothing here. Calls no shard attributed (older
-- warehouses, the export stage's judge) form the row whose strategy is 'unattributed'.
with calls as (
    select run_id, coalesce(strategy, 'unattributed') as strategy, coalesce(cached, false) as cached, prompt_tokens, completion_tokens,
           created_at - to_microseconds(cast(round(coalesce(latency_s, 0) * 1e6) as bigint)) as started,
           created_at as ended
    from llm_calls
), generated as (
    select *,
           max(ended) over (partition by run_id, strategy order by started, ended
                            rows between unbounded preceding and 1 preceding) as reached
    from calls
    where not cached
), islands as (
    select *,
           sum(case when reached is null or started > reached then 1 else 0 end)
               over (partition by run_id, strategy order by started, ended rows unbounded preceding) as island
    from generated
), spans as (
    select run_id, strategy, island, epoch(max(ended)) - epoch(min(started)) as seconds
    from islands
    group by run_id, strategy, island
), engine as (
    select run_id, strategy, sum(seconds) as engine_seconds
    from spans
    group by run_id, strategy
), samples as (
    select run_id, strategy,
           count(*) filter (where not cached) as engine_samples,
           count(*) filter (where cached) as cached_samples,
           coalesce(sum(prompt_tokens) filter (where not cached), 0) as prompt_tokens,
           coalesce(sum(completion_tokens) filter (where not cached), 0) as completion_tokens
    from calls
    group by run_id, strategy
), searches as (
    select run_id, coalesce(strategy, 'unattributed') as strategy, count(*) as retrievals,
           count(distinct cache_key) filter (where not coalesce(cached, false)) as retrieval_calls,
           count(*) filter (where coalesce(cached, false)) as cached_retrievals
    from retrievals
    group by run_id, strategy
), sft as (
    select run_id, strategy, count(*) as sft_examples from sft_examples group by run_id, strategy
), pairs as (
    select run_id, strategy, count(*) as preference_pairs from preference_pairs group by run_id, strategy
), labels as (
    select run_id, strategy, count(*) as step_labels from step_labels group by run_id, strategy
), keys as (
    select run_id, strategy from samples
    union select run_id, strategy from searches
)
select
    keys.run_id,
    keys.strategy,
    coalesce(samples.engine_samples, 0) as engine_samples,
    coalesce(samples.cached_samples, 0) as cached_samples,
    coalesce(samples.prompt_tokens, 0) as prompt_tokens,
    coalesce(samples.completion_tokens, 0) as completion_tokens,
    round(coalesce(engine.engine_seconds, 0), 3) as engine_seconds,
    coalesce(searches.retrievals, 0) as retrievals,
    coalesce(searches.retrieval_calls, 0) as retrieval_calls,
    coalesce(searches.cached_retrievals, 0) as cached_retrievals,
    coalesce(sft.sft_examples, 0) as sft_examples,
    coalesce(pairs.preference_pairs, 0) as preference_pairs,
    coalesce(labels.step_labels, 0) as step_labels,
    round(engine.engine_seconds / nullif(sft.sft_examples, 0), 3) as engine_seconds_per_sft_example,
    round(engine.engine_seconds / nullif(pairs.preference_pairs, 0), 3) as engine_seconds_per_pair,
    round(engine.engine_seconds / nullif(labels.step_labels, 0), 3) as engine_seconds_per_step_label,
    (samples.prompt_tokens + samples.completion_tokens) // nullif(sft.sft_examples, 0) as tokens_per_sft_example,
    (samples.prompt_tokens + samples.completion_tokens) // nullif(pairs.preference_pairs, 0) as tokens_per_pair
from keys
left join samples using (run_id, strategy)
left join engine using (run_id, strategy)
left join searches using (run_id, strategy)
left join sft using (run_id, strategy)
left join pairs using (run_id, strategy)
left join labels using (run_id, strategy)
order by keys.run_id, keys.strategy
