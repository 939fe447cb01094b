with ranked as (
    select *, row_number() over (order by sample_key, question_id) as rank
    from questions
    where dataset = $dataset and partition = $partition
)
select * exclude (rank) from ranked
where $limit is null or rank <= $limit
order by rank
