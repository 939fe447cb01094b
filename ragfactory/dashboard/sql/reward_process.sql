select strategy || ' ' || name as strategy, scaled
from rewards
where run_id = $run and ($strategy is null or strategy = $strategy) and scaled is not null
