select distinct strategy from nodes where run_id = $run order by strategy
