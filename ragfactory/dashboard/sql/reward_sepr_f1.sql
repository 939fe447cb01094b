select 'apex' as strategy, f1
from plan_scores
where run_id = $run and ($strategy is null or $strategy = 'apex') and f1 is not null
