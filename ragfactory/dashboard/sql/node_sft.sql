-- The SFT examples whose conversation went through a node.
select example_id, messages
from sft_examples
where run_id = $run and list_contains(node_ids, $node)
order by example_id
