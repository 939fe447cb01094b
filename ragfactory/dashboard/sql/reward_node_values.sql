select strategy, value
from nodes
where run_id = $run and ($strategy is null or strategy = $strategy) and value is not null
