-- Each question's gold supporting paragraphs, by normalised title (docs/labels.md, "Search
-- behaviour"): HotpotQA's and 2WikiMultiHopQA's supporting_facts titles, and MuSiQue's paragraphs
-- marked is_supporting (the loader keeps their passage ids; their titles come from passages).
-- A question with none (Bamboogle), or whose metadata is not JSON, has no row; a question's hop
-- count is its number of gold titles.
with facts as (
    select question_id, dataset,
           unnest(case when json_valid(metadata) then json_extract_string(metadata, '$.supporting_facts[*][0]') end) as title
    from questions
), supporting as (
    select question_id, dataset,
           unnest(case when json_valid(metadata) then json_extract_string(metadata, '$.supporting_passage_ids[*]') end) as passage_id
    from questions
), by_passage as (
    select s.question_id, s.dataset, p.title
    from supporting s
    join passages p using (passage_id)
), titles as (
    select question_id, dataset, title from facts
    union all
    select question_id, dataset, title from by_passage
)
select distinct question_id, dataset, lower(trim(title, ' "')) as title
from titles
where nullif(trim(title, ' "'), '') is not null
order by question_id, title
