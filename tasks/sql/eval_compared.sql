select * from evals
where run_id = $run_id and list_contains($datasets, dataset) and list_contains($modes, mode)
