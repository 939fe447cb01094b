"""ReasonRAG: MCTS over Reasoning / Grounding / Terminal stages with SPRE values."""
