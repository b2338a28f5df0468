"""The counter of one cluster (`hop.py`): every message of the selected topics counted once, per window, into
its audit topic, in transactions with its consumer offsets."""
