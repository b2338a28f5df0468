"""The lake job (`hop.py`): a Structured Streaming query from one cluster into the `bronze` Delta table, with
the lake tier's counts written to the cluster's audit topic."""
