"""bench.md: one markdown table per suite (from its ``columns`` and ``rows``), the machine and the command."""
from __future__ import annotations

from typing import Any

from ctxbench.core.markdown_table import md_table


def fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        if a >= 0.01:
            return f"{v:.3f}"
        return f"{v:.2e}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(columns: list[list[str]], rows: list[dict[str, Any]]) -> list[str]:
    """``columns`` = [[key, header], ...]; rows missing a key show "–"; skipped rows show the reason."""
    cells = []
    for r in rows:
        if r.get("status") in ("skipped", "error"):
            cells.append([r.get(columns[0][0]), f"{r['status']}: {fmt(r.get('reason', ''))}"] + [""] * (len(columns) - 2))
        else:
            cells.append([r.get(k) for k, _ in columns])
    return md_table([h for _, h in columns], cells, formatter=fmt).split("\n")


def machine_line(m: dict[str, Any]) -> str:
    git = m.get("git") or {}
    commit = (git.get("commit") or "?")[:10] + (" (dirty)" if git.get("dirty") else "")
    mem = m.get("mem_total_bytes")
    mem_s = f", {mem / 2**30:.0f} GiB RAM" if mem else ""
    return (f"{m.get('cpu_model') or 'CPU'} — {m.get('cpus_usable')} usable of {m.get('cpu_count')} CPUs{mem_s}, "
            f"torch {m.get('torch_version')} ({m.get('torch_threads')} threads), Python {m.get('python')}, "
            f"commit {commit}, {m.get('timestamp')}")


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# ctxbench bench", "", f"Command: `{doc.get('command', 'python -m ctxbench bench')}`", "",
             f"Machine: {machine_line(doc.get('machine', {}))}", ""]
    for name, res in doc.get("suites", {}).items():
        lines += [f"## {name}", ""]
        status = res.get("status")
        if status != "ok":
            lines += [f"**{status}**: {res.get('reason', '')}", ""]
            continue
        if res.get("description"):
            lines += [res["description"], ""]
        if res.get("rows") and res.get("columns"):
            lines += table(res["columns"], res["rows"]) + [""]
        for extra in res.get("tables", []):
            if extra.get("title"):
                lines += [f"### {extra['title']}", ""]
            lines += table(extra["columns"], extra["rows"]) + [""]
            if extra.get("notes"):
                lines += [f"- {note}" for note in extra["notes"]] + [""]
        for note in res.get("notes", []):
            lines.append(f"- {note}")
        lines += ["", f"({res.get('seconds', 0):.0f} s)", ""]
    return "\n".join(lines).rstrip() + "\n"
