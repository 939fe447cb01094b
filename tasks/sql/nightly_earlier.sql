select run_id from runs
where flow = 'build' and run_id <> $run_id and status in ('completed', 'partial')
  and json_extract_string(config, '$.name') = $name and started_at < $before
order by started_at desc
limit $n
