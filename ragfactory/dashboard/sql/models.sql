-- The model registry with each model's lineage: the build it trained on, its base and method,
-- and the Prefect flow run that trained it (its run is train-<model id>, flows/train.py).
select
    m.model_id,
    m.method,
    json_extract_string(m.lineage, '$.name') as name,
    json_extract_string(m.lineage, '$.run_id') as build_run_id,
    json_extract_string(m.lineage, '$.table') as export_table,
    m.base_model,
    m.metrics,
    m.path,
    m.created_at,
    r.flow_run_id
from models m
left join runs r on r.run_id = 'train-' || m.model_id
order by m.created_at
