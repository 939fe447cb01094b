-- The preference pairs a node is the chosen or the rejected side of.
select pair_id, decision, chosen_value, rejected_value, gap, chosen_node_id, rejected_node_id,
       prompt, chosen, rejected
from preference_pairs
where run_id = $run and (chosen_node_id = $node or rejected_node_id = $node)
order by pair_id
