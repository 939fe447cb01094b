select role, model_fingerprint, messages, sampling, seed, sample_index, text, finish_reason,
       prompt_tokens, completion_tokens, latency_s, created_at
from llm_calls
where run_id = $run and call_id = $call
