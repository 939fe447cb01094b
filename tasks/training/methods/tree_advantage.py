"""TreePS-RAG's tree-advantage policy gradient (Eq. 3) on the ``trajectories`` export: per-token
advantages A(n), observations masked (``tasks/training/tree_advantage.py``)."""

from ragfactory.tasks.training.methods.spec import MethodSpec

SPEC = MethodSpec(
    "tree-advantage",
    "trajectories",
    ("prompt", "response", "step_spans", "observation_spans", "is_sampled"),
    config="ragfactory.tasks.training.tree_advantage:TreeAdvantageConfig",
    module="ragfactory.tasks.training.tree_advantage",
    # TreePS-RAG trains at lr 1e-6 with batches of 512 (Table 5); a CPU worker takes small batches,
    # so a larger rate; the paper's batch and rate are overrides away.
    defaults={"per_device_train_batch_size": 2, "learning_rate": 1e-5},
)
