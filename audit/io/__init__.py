"""The I/O layer the hops and the books share: Kafka client helpers, the audit-topic reader, the Spark
session, Delta reads and writes, the jar cache, logging. Imports only the contract and settings."""
