"""The hops that move or count messages: the per-cluster counter, the replicator and the lake job, each
writing its counts and status to the audit topic. Imports the contract, settings and io."""
