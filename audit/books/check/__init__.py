"""Step 2 of a run: each audit-topic message checked against the contract and the deployment's expectations.
python_checker.py checks any message and names what is wrong; spark_columns.py checks a record written the
canonical way as Spark columns; checked_rows.py types their rows as the tables hold them."""
