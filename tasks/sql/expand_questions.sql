-- the questions of the ingest versions a build read (a dataset it did not ingest offers all)
with chosen as (
    select dataset, question_ids from ingests where list_contains($versions, version)
),
versioned as (
    select unnest(question_ids) as question_id from chosen
),
ranked as (
    select question_id, dataset,
           row_number() over (partition by dataset order by sample_key, question_id) as rank
    from questions
    where list_contains($datasets, dataset) and partition = $partition
      and (dataset not in (select dataset from chosen) or question_id in (select question_id from versioned))
)
select question_id from ranked
where $per_dataset is null or rank <= $per_dataset
order by dataset, rank
