"""The contract every part shares: the audit record, windows, audit time, topic naming, the completeness
rules and the Delta table schemas. Pure: no I/O, and it imports nothing else of kafka-audit."""
