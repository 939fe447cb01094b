with node_counts as (
    select
        run_id,
        strategy,
        count(distinct question_id) as n_questions,
        count(*) as n_nodes,
        count(*) filter (where is_selected) as n_kept,
        count(*) filter (where not is_selected) as n_pruned,
        count(*) filter (where is_format_error) as n_format_errors,
        round(avg(case when is_format_error then 0.0 else 1.0 end), 3) as well_formed
    from nodes
    group by run_id, strategy
), rollout_counts as (
    select nodes.run_id, nodes.strategy, count(*) as n_rollouts
    from rollouts
    join nodes on nodes.node_id = rollouts.node_id
    group by nodes.run_id, nodes.strategy
), sft_counts as (
    select run_id, strategy, count(*) as n_sft_examples
    from sft_examples
    group by run_id, strategy
), pair_counts as (
    select run_id, strategy, count(*) as n_preference_pairs
    from preference_pairs
    group by run_id, strategy
), trajectory_counts as (
    select run_id, strategy, count(*) as n_trajectories,
           count(*) filter (where reward > 0) as n_rewarded_trajectories
    from trajectories
    group by run_id, strategy
), plan_counts as (
    -- a scored plan is a node of the strategy that planned it (plan_id is its node_id)
    select s.run_id, n.strategy, count(*) as n_scored_plans, round(avg(s.f1), 3) as mean_plan_f1
    from plan_scores s
    join nodes n on n.run_id = s.run_id and n.node_id = s.plan_id
    group by s.run_id, n.strategy
), label_counts as (
    select run_id, strategy, count(*) as n_step_labels
    from step_labels
    group by run_id, strategy
)
select
    node_counts.*,
    coalesce(rollout_counts.n_rollouts, 0) as n_rollouts,
    coalesce(sft_counts.n_sft_examples, 0) as n_sft_examples,
    coalesce(pair_counts.n_preference_pairs, 0) as n_preference_pairs,
    coalesce(trajectory_counts.n_trajectories, 0) as n_trajectories,
    coalesce(trajectory_counts.n_rewarded_trajectories, 0) as n_rewarded_trajectories,
    coalesce(label_counts.n_step_labels, 0) as n_step_labels,
    coalesce(plan_counts.n_scored_plans, 0) as n_scored_plans,
    plan_counts.mean_plan_f1
from node_counts
left join rollout_counts using (run_id, strategy)
left join sft_counts using (run_id, strategy)
left join pair_counts using (run_id, strategy)
left join trajectory_counts using (run_id, strategy)
left join label_counts using (run_id, strategy)
left join plan_counts using (run_id, strategy)
order by run_id, strategy
