"""Step 5 of a run: the verdict per (logical topic, window, tier) along each topic's path (paths.py), judged in
the driver for a small run (in_driver.py) or in Spark (in_spark.py, verdicts.py) by completeness.py, the final
windows it restates (restatements.py) and the complete-through watermarks (complete_through.py)."""
