-- How far one build's process label sources agree, per strategy (the label_agreement view).
select strategy, source_a, source_b, against_gold, n_nodes, round(rho, 4) as rho, round(tau_b, 4) as tau_b
from label_agreement
where run_id = $run
order by strategy, source_a, source_b
