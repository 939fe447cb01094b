-- The model a training flow run trains: its run is train-<model id> (flows/train.py).
select substr(run_id, length('train-') + 1) as model_id
from runs
where flow = 'train' and flow_run_id = $flow_run_id
