"""The hops that move or count messages, a package each: the per-cluster `counter`, the `replicator` and the
`lake` job, each writing its counts and status to the audit topic; what they share (the run loop, retention
gaps, upkeep, faults) sits beside them. Imports the contract, settings and io."""
