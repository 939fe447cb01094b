-- The model registry with each model's lineage: the build it trained on, its base and method.
select
    model_id,
    method,
    json_extract_string(lineage, '$.name') as name,
    json_extract_string(lineage, '$.run_id') as build_run_id,
    json_extract_string(lineage, '$.table') as export_table,
    base_model,
    metrics,
    path,
    created_at
from models
order by created_at
