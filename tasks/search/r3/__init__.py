"""R3-RAG (003): cold-start trajectories, best-of-N, judged process rewards."""
