select strategy, gap
from preference_pairs
where run_id = $run and ($strategy is null or strategy = $strategy) and gap is not null
