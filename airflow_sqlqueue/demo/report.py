"""The demo report as a short text for people (``--json`` prints the dict itself)."""

from __future__ import annotations

import os
from typing import Any


def _n(value: Any) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.0f}"


def _path(path: str) -> str:
    """A path relative to the current directory when it is inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def format_report(report: dict[str, Any]) -> str:
    """The report: the counts and their sum, per type, throughput, phases, and where the files are."""
    detail = report["sent_detail"]
    verdict = "OK" if report["adds_up"] else "DOES NOT ADD UP"
    lines = [
        f"sqlqueue demo: {report['sent']:,} messages, SQLite -> Airflow drain -> Parquet -> Spark, "
        f"in {report['total_seconds']:.1f} s",
        "",
        f"  sent           {_n(report['sent']):>8}   ({detail['regular']:,} regular, {detail['expiring']:,} with a "
        f"{detail['time_to_be_received_seconds']:g} s time-to-be-received, {detail['poison']:,} poison)",
        f"  processed      {_n(report['processed']):>8}   by Spark, one row per message id "
        f"({report['duplicates_removed']:,} duplicates removed)",
        f"  expired        {_n(report['expired']):>8}   removed by the maintenance purge",
        f"  error queue    {_n(report['error_queue']):>8}   poison rows moved by the drain, with failure headers",
        f"  left in queue  {_n(report['left_in_queue']):>8}",
        f"  sent = processed + expired + error queue + left: {report['sent']:,} = {report['processed']:,} + "
        f"{report['expired']:,} + {report['error_queue']:,} + {report['left_in_queue']:,}   {verdict}",
        "",
        f"  {'message type':<42} {'sent':>7} {'processed':>10} {'p50 ms':>9} {'p95 ms':>9}",
    ]
    for name, row in report["per_type"].items():
        latency = row["latency_ms"] or {}
        lines.append(f"  {name:<42} {_n(row['sent']):>7} {_n(row['processed']):>10} "
                     f"{_n(latency.get('p50')):>9} {_n(latency.get('p95')):>9}")
    latency = report["latency_ms"]
    speed = report["throughput_per_second"]
    phases = report["phases_seconds"]
    tasks = report["dag_run"]["tasks"]
    lines += [
        "",
        f"  latency time sent -> drained (ms): min {_n(latency['min'])}, avg {_n(latency['avg'])}, "
        f"p50 {_n(latency['p50'])}, p95 {_n(latency['p95'])}, max {_n(latency['max'])}",
        f"  throughput (msg/s): send {_n(speed['send'])}, drain {_n(speed['drain'])}, "
        f"Spark task (with JVM start) {_n(speed['spark'])}, end to end {_n(speed['end_to_end'])}",
        "  phases (s): " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in phases.items()),
        f"  DAG {report['dag_run']['dag_id']} {report['dag_run']['state']}: "
        + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in tasks.items()),
        "  check: " + ("no findings" if not report["findings"] else
                       "; ".join(f"{f['queue']}: {f['code']}" for f in report["findings"])),
        "",
        "  output:",
    ]
    files = report["files"]
    for label, key in (("queues (SQLite)", "queues"), ("drained batches", "batches"),
                       ("messages by type/date", "messages"), ("Spark summary", "summary"),
                       ("Airflow home", "airflow_home"), ("Airflow log", "log"), ("this report", "report")):
        extra = f"  ({files['batch_files']} Parquet files)" if key == "batches" else ""
        lines.append(f"    {label:<22} {_path(files[key])}{extra}")
    return "\n".join(lines)
