"""The local harness: embedded Kafka clusters, their certificates, supervised services, the mailbox,
and the demo, pipeline and soak built from them. Imports every lower layer, never the CLI."""
