"""Step 4 of a run: the windows that received records re-summed per tier (tier_counts.py), and where each tier
stands from its reporters' newest statuses (tier_status.py)."""
