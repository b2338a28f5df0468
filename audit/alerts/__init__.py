"""The alerts: emails about what the books say, sent after each reconciliation or by `kaudit alert`.

`rules.py` decides which alerts a state of the books calls for (loss, over, recovery, lag, restated) and
why each may have happened, `drops.py` the traffic drops that completeness cannot see,
`loss_partitions.py` where a loss is, `mail.py` composes and sends the emails, and `run.py` runs it all
over the Delta tables: read, decide, record in the `alerts` log, then send. Reads the books' tables
through the io layer; imports the contract, settings and io only.
"""
