"""``sqlqueue demo``: provision, send, purge, drain to Parquet, Spark, check and count, on a SQLite file.

``run_demo(output_dir, messages=N)`` returns the report (a JSON-serialisable dict); ``format_report`` turns it
into text. See docs/demo.md.
"""

from .report import format_report
from .runner import run_demo

__all__ = ["format_report", "run_demo"]
