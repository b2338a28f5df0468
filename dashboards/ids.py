"""Every component id of the audit UI, in one place: a typo fails at import, not silently in a callback."""

from __future__ import annotations

# shell
NAV = "nav-location"  # dcc.Location the pages write to when they navigate (heatmap click, controls)
REFRESH = "refresh-interval"  # dcc.Interval: pages reread the (cached) tables on each tick
WAITING = "waiting-for-books"  # what every page shows until the books' first run, then the page itself
WAITING_POLL = "waiting-poll"  # dcc.Interval of the waiting page: have the books run yet?

# controls, on every page that shows data over time
RANGE = "range-picker"
SEARCH = "topic-search"

# overview
HEATMAP = "overview-heatmap"
WORST = "overview-worst-topics"
HEALTH = "overview-tier-health"

# topic
TOPIC = "topic-picker"
CORRELATION = "topic-correlation"
COMPLETENESS = "topic-completeness"
MISSING = "topic-missing"
LATENCY = "topic-latency"
WINDOW_TABLE = "topic-window-table"

# lag
WATERMARKS = "lag-watermarks"
LAG = "lag-messages"
STATUS_TABLE = "lag-tier-status"
UNREACHABLE = "lag-unreachable-clusters"

# alerts
ALERTS_TABLE = "alerts-table"
