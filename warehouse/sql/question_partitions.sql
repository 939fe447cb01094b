with counted as (
    select
        dataset,
        count(*) filter (where partition = 'train') as n_train,
        count(*) filter (where partition = 'valid') as n_valid,
        count(*) filter (where partition = 'test') as n_test,
        count(*) as n_questions
    from questions
    group by dataset
)
select * from counted
order by dataset
