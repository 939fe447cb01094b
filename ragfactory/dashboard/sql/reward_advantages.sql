select strategy, advantage
from nodes
where run_id = $run and ($strategy is null or strategy = $strategy) and advantage is not null
