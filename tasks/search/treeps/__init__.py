"""TreePS-RAG: generate-then-prune ReAct trees (``expansion``), step prompts and parsing
(``steps``), similarity pruning (``pruning``), and the registered plug-in (``plugin``)."""
