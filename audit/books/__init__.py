"""The books: the reconciliation that balances every tier's counts into Delta tables. Imports the contract,
settings and io.

`run.py` is one run (`reconcile`), its steps in order, each a package here:
read (what is new in every cluster's audit topic), check (each message against the contract and the
deployment's expectations), store (records once per record id, rejects, retention gaps), count (`tier_counts`
and `tier_status`), judge (`completeness`, restatements, complete-through watermarks); then read again stores
the offsets the run read up to. Each step takes the run's `Lake` and only the settings it reads."""
