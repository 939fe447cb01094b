-- The named rewards a build wrote (R3-RAG's relevance, format, process and outcome, ...).
select name, bool_or(scaled is not null) as scaled
from rewards
where run_id = $run
group by name
order by name
