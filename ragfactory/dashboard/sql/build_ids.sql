-- The builds' run ids, newest first (the pickers; the runs page reads builds.sql).
select run_id from runs where flow = 'build' order by started_at desc
