"""A human-readable status page per emulated job (``GET /jobs/{id}``): what the demo's job link opens."""

from __future__ import annotations

import html
import time
from typing import Any

_TERMINAL_REFRESH = ""
_LIVE_REFRESH = '<meta http-equiv="refresh" content="2">'


def _when(epoch: Any) -> str:
    if not epoch:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(epoch)))


def render_job_page(job: dict[str, Any], output: str, cluster: str) -> str:
    """The page for one job snapshot (``SlurmJobApiEmulator.job()``), with the tail of its output."""
    state = "+".join(job.get("state") or ["UNKNOWN"])
    live = not job.get("end_time") or "COMPLETING" in state
    rows = [
        ("State", f"{state}" + (f" ({job['reason']})" if job.get("reason") not in (None, "", "None") else "")),
        ("Exit code", "—" if job.get("exit_code") is None else str(job["exit_code"])),
        ("Signal", str(job.get("signal") or "—")),
        ("Partition", job.get("partition") or "—"),
        ("Nodes", job.get("node_list") or "—"),
        ("Submitted", _when(job.get("submit_time"))),
        ("Started", _when(job.get("start_time"))),
        ("Ended", _when(job.get("end_time"))),
        ("Working directory", job.get("working_directory") or "—"),
        ("Standard output", job.get("standard_output") or "—"),
        ("Standard error", job.get("standard_error") or "—"),
        ("Comment", job.get("comment") or "—"),
    ]
    table = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    tail = "\n".join(output.splitlines()[-200:])
    title = f"Slurm job {job['job_id']} ({job.get('name') or 'unnamed'})"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>{_LIVE_REFRESH if live else _TERMINAL_REFRESH}
<style>body{{font-family:sans-serif;margin:2em}}th{{text-align:left;padding-right:2em}}
pre{{background:#f4f4f4;padding:1em;overflow:auto}}</style></head>
<body><h1>{html.escape(title)}</h1><p>Emulated cluster <b>{html.escape(cluster)}</b> (local Slurm Job API
emulator).</p><table>{table}</table><h2>Output</h2><pre>{html.escape(tail) or "(no output yet)"}</pre></body></html>
"""
