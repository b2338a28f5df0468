"""docs/tables.md, generated from the table catalogue (audit/contract/tables.py): every table analysts read
with its key, partitioning and columns, the pattern for reading only complete windows, and the completeness
rules (audit/contract/completeness.py).

    python -m audit.contract.tables_doc > docs/tables.md
"""

from __future__ import annotations

from audit.contract.tables import TABLES

# The analyst's pattern for lake queries, documented in docs/tables.md (and used by notebooks/).
COMPLETE_WINDOWS_SQL = """## Reading only complete windows

`completeness_watermarks.complete_through` is the end of the last window up to which every window of a
topic is final and complete at a tier. A query of the lake's `bronze` table restricted to the windows
before it reads only data the books have closed: no window still in flight, none with a known loss or
duplicates. With the default prefix naming the lake's topic is the logical topic (`dc1.orders`):

```sql
SELECT b.*
FROM bronze AS b
JOIN completeness_watermarks AS w
  ON w.logical_topic = b.topic AND w.tier = 'lake'
WHERE b.window_start < w.complete_through        -- windows are aligned: the whole window is before it
  AND b.date <= to_date(w.complete_through)      -- lets Delta skip the newer date partitions
```

A topic without a row, or with `complete_through` null, has no closed window yet: the inner join leaves
it out. `first_open_window` and `first_open_status` say what holds the watermark back. In Python,
`audit.books.judge.complete_through.complete_through(spark, "dc1.orders", "lake")` returns the same time.
A window that changes after it was final (late counts, a replay, a recount) is recorded in
`restatements` and moves the watermark back if it is no longer complete."""


def markdown() -> str:
    """docs/tables.md: every table analysts read, its key, partitioning and columns."""
    lines = [
        "# The Delta tables",
        "",
        "Generated from `audit/contract/tables.py` by `python -m audit.contract.tables_doc > docs/tables.md` (a test keeps the two equal).",
        "Every table lives under `lake_path` (default `<state_dir>/lake`), one folder each, and is written by",
        "MERGE on its key, so reruns change nothing (`tier_counts` and `completeness` by rewriting the windows a run",
        "touched, in window order: a query naming its windows reads only their files). Times are UTC. Read them with Spark SQL",
        '(``spark.read.format("delta").load(path)``) or without a JVM with the `deltalake` package. A missing table is',
        "created by the first job that needs it, with `deltalake` (Delta protocol 1/2, no deletion vectors).",
        "",
    ]
    for table in TABLES.values():
        lines += [
            f"## `{table.name}`",
            "",
            table.doc,
            "",
            f"Key: {', '.join(f'`{k}`' for k in table.key)}. "
            + (
                f"Partitioned by {', '.join(f'`{p}`' for p in table.partition_by)}."
                if table.partition_by
                else "Not partitioned."
            )
            + (
                f" Files keep min and max of {', '.join(f'`{c}`' for c in table.stats_columns)} only: a filter on"
                " them skips files, one on another column (`date` aside) reads every file of the partitions read"
                " (a table created before its statistics columns were declared keeps them for its first 32 columns)."
                if table.stats_columns
                else ""
            ),
            "",
            "| column | type | meaning |",
            "|---|---|---|",
        ]
        lines += [f"| `{c.name}` | {c.type.replace('|', '/')} | {c.doc.replace('|', '/')} |" for c in table.columns]
        lines.append("")
    lines += COMPLETE_WINDOWS_SQL.splitlines() + [""]
    from audit.contract import completeness

    rules = completeness.__doc__.split("The rules, in order (see docs/tables.md):")[1].strip()
    lines += [
        "## How `completeness.status` is decided",
        "",
        "From `audit/contract/completeness.py`, in order:",
        "",
        rules,
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
