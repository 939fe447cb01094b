with sourced as (
    select passage_id, title, text, source
    from passages
)
select
    passage_id,
    -- an id two sources give different passages: the one the index holds, its first source's
    min_by(title, source) as title,
    min_by(text, source) as text,
    list(distinct source order by source) as sources
from sourced
group by passage_id
