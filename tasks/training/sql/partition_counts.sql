select partition, count(*) as n from questions
where list_contains($ids, question_id)
group by partition order by partition
