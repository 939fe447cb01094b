select * exclude (run_id) from nodes where run_id = $run and node_id = $node
