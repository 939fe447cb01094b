"""ReasonRAG (001): MCTS over Reasoning / Grounding / Terminal stages with SPRE values."""
