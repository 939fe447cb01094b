-- Each tree's final outcome, the rewards page's outcome split: the best reward of its kept
-- answers, correct from 0.5 up; a tree with no kept, scored answer has none.
select
    strategy,
    question_id,
    case
        when max(reward) filter (where is_leaf and is_selected) is null then 'no answer'
        when max(reward) filter (where is_leaf and is_selected) >= 0.5 then 'correct'
        else 'incorrect'
    end as outcome
from nodes
where run_id = $run
group by strategy, question_id
