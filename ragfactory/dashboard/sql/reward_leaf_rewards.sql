select strategy, reward
from nodes
where run_id = $run and ($strategy is null or strategy = $strategy) and is_leaf and reward is not null
