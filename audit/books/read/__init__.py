"""Step 1 of a run, and its last: what is new in the audit topic of every configured cluster (audit_topics.py),
the offsets read up to, and the form the records read take in the steps after (run_records.py)."""
