select rollout_id, final_answer, em, f1, n_steps, seed, text
from rollouts
where run_id = $run and node_id = $node
order by rollout_id
