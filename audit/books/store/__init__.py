"""Step 3 of a run: the checked rows stored, each valid record once per record id, each reject once per offset
(records.py), and the retention gaps the status records carry (retention_gaps.py)."""
