-- The other children of a node's parent: what its fate is weighed against (fates.py).
select node_id, kind, strategy, value, is_selected, is_format_error, passage_ids, parsed
from nodes
where run_id = $run and parent_id = $parent and node_id <> $node
order by path
