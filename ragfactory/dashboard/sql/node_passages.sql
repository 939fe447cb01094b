select passage_id, source, title, text
from passages
where list_contains($ids, passage_id)
order by list_position($ids, passage_id)
