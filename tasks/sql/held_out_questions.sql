select question_id, question, 'warehouse:' || partition as source
from questions
where list_contains($partitions, partition)
order by question_id
