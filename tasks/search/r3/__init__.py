"""R3-RAG: cold-start trajectories, best-of-N, judged process rewards."""
