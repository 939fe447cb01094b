-- One row per step node of the run's trees of one strategy: what the searches up to it found.
select node_id, gold_found, hops
from search_behaviour
where run_id = $run_id and strategy = $strategy
