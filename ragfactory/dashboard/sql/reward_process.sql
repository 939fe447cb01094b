-- One named reward of the rewards table: scaled where a scale applies, else its raw value.
select r.strategy, n.depth, o.outcome, coalesce(r.scaled, r.value) as value
from rewards r
left join nodes n on n.run_id = r.run_id and n.node_id = r.node_id
left join outcomes o on o.strategy = r.strategy and o.question_id = r.question_id
where r.run_id = $run and r.name = $name and coalesce(r.scaled, r.value) is not null
