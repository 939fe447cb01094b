"""The warehouse explorer: runs, trees, rewards, SQL, models and training (``ragfactory dashboard``)."""
