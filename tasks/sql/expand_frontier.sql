-- the questions of the ingest versions a build read (a dataset it did not ingest offers all)
with chosen as (
    select dataset, question_ids from ingests where list_contains($versions, version)
),
versioned as (
    select unnest(question_ids) as question_id from chosen
),
expanded as (
    select distinct n.question_id from nodes n join runs r using (run_id)
    where n.strategy = $strategy and n.run_id <> $run_id
      and json_extract_string(r.config, '$.llm.policy.backend') = $backend
      and json_extract_string(r.config, '$.llm.policy.model') = $model
)
select question_id from questions
where list_contains($datasets, dataset) and partition = $partition
  and (dataset not in (select dataset from chosen) or question_id in (select question_id from versioned))
  and question_id not in (select question_id from expanded)
order by sample_key, question_id
limit $n
