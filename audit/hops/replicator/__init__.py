"""The replicator (`hop.py`): topics, the audit topic included, copied between two clusters at least once, or
exactly once (`exactly_once.py`)."""
