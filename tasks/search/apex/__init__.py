"""APEX-Searcher: planning, SEPR and plan execution (``expansion``, ``execute``), plan
text (``plan_format``, ``plan_rewrite``), and the registered plug-in (``plugin``)."""
