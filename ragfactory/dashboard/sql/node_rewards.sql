select name, value, scale, scaled, is_format_error, error
from rewards
where run_id = $run and node_id = $node
order by name
