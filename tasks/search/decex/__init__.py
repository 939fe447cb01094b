"""DecEx-RAG: decision/execution search trees with pruning (``expansion``), their state
histories and prompts (``history``), rollouts (``rollout``), and the registered plug-in
(``plugin``)."""
