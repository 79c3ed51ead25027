"""Bad input, tried at scale: every case of ``scripts/bad_input_cases.py`` as a real ``python -m ctxbench`` run.

    python scripts/bad_input_sweep.py [--repo DIR] [--python PATH] [--out DIR] [--jobs 2] [--only GROUP]
                                      [--timeout 120] [--shared DIR] [--keep]

Each case writes its malformed input (or a corrupted copy of a real run folder) into a fresh temp folder
and runs the command with ``cwd=--repo`` and ``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled``;
eval runs talk to a fake OpenAI-compatible server started here (127.0.0.1, one behaviour per URL path).
Outcomes:

- ``clear``: exit code != 0 (no signal), no ``Traceback`` in stderr, the last stderr line starts with
  ``ctxbench: error:`` and names the case's file or key;
- ``recovered``: exit 0 where a documented recovery is right (a torn last line, an earlier checkpoint)
  and the run says so (or its output shows it);
- ``traceback``: a traceback in stderr;
- ``accepted``: exit 0 on a malformed input (garbage taken in silently), or a peak memory over the
  case's bound (an unbounded allocation taken in, whatever came after);
- ``not_recovered``: a clear error where only the recovery is right (a corrupt newest checkpoint
  with an intact earlier one: resume must fall back to it);
- ``unclear``: exit != 0 without a traceback but without a ``ctxbench: error:`` last line;
  ``vague``: a ``ctxbench: error:`` line that names neither the file nor the key;
- ``timeout``, ``crash`` (killed by a signal), ``EXECUTED`` (a malicious payload ran: the worst).

Writes ``bad_input_sweep.json`` (one record per case) and ``bad_input_sweep.md`` (counts per group and
outcome, and every case that is not clear) under ``--out``. The checkout is only read: everything the
commands write goes below the temp folder.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bad_input_cases as bic  # noqa: E402 - the script's own helper, next to it

HERE = Path(__file__).resolve().parent
OUTCOMES = ("clear", "recovered", "not_recovered", "traceback", "accepted", "unclear", "vague", "timeout", "crash",
            "EXECUTED")
GOOD = ("clear", "recovered", "ok")
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "DS_ACCELERATOR": "cpu"}
REPLY = "7 May 2023"


# ---- the fake OpenAI-compatible server ------------------------------------------------------------

def chat_body(content: Any = REPLY, usage: dict | None = None) -> dict:
    return {"id": "fake-1", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}


MODELS = {"object": "list", "data": [{"id": "fake", "object": "model"}]}


class Handler(BaseHTTPRequestHandler):
    """``/<mode>/v1/models`` and ``/<mode>/v1/chat/completions``; ``mode`` picks the misbehaviour."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _mode(self) -> tuple[str, str]:
        parts = self.path.strip("/").split("/", 2)
        return (parts[0], parts[2]) if len(parts) == 3 else ("ok", self.path.strip("/"))

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server hook
        mode, _ = self._mode()
        try:
            if mode == "models_nonjson":
                self._send(200, None, raw=b"<html>not json</html>")
            elif mode == "models_empty":
                self._send(200, {"object": "list", "data": []})
            elif mode == "models_500":
                self._send(500, {"error": {"message": "boom"}})
            else:
                self._send(200, MODELS)
        except OSError:
            pass

    def do_POST(self) -> None:  # noqa: N802 - http.server hook
        mode, _ = self._mode()
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        try:
            self._chat(mode)
        except OSError:  # the client gave up (timeouts): nothing to answer
            pass

    def _chat(self, mode: str) -> None:
        if mode == "close_mid":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(b'{"id":')
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "hang":
            time.sleep(20)
        bodies: dict[str, Any] = {
            "choices_empty": dict(chat_body(), choices=[]),
            "choices_not_list": dict(chat_body(), choices="x"),
            "choice_string": dict(chat_body(), choices=["x"]),
            "content_null": chat_body(None),
            "content_number": chat_body(5),
            "message_missing": dict(chat_body(), choices=[{"index": 0, "finish_reason": "stop"}]),
            "body_list": [1, 2],
            "usage_negative": chat_body(usage={"prompt_tokens": -5, "completion_tokens": -3, "total_tokens": -8}),
        }
        if mode in bodies:
            self._send(200, bodies[mode])
        elif mode == "http500":
            self._send(500, {"error": {"message": "internal error"}})
        elif mode in ("http404", "http401"):
            self._send(int(mode[4:]), {"error": {"message": "no"}})
        elif mode == "nonjson":
            self._send(200, None, raw=b"<html>502 Bad Gateway</html>")
        elif mode == "truncated_json":
            self._send(200, None, raw=json.dumps(chat_body()).encode()[:40])
        elif mode == "retry_after_huge":
            self._send(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "100000"})
        elif mode == "bad_gzip":
            self._send(200, chat_body(), headers={"Content-Encoding": "gzip"})
        else:
            self._send(200, chat_body())


class FakeServer:
    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- running one command ----------------------------------------------------------------------------

def run_command(python: str, argv: list[str], cwd: Path, work: Path, timeout: int,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python -m ctxbench argv`` in its own process group; returns rc, output, seconds, peak RSS."""
    full_env = {**os.environ, **ENV, "CTXBENCH_CACHE": str(work / "cache"), **(env or {})}
    full_env.setdefault("OMP_NUM_THREADS", "1")
    out_f, err_f = work / "stdout.txt", work / "stderr.txt"
    t0 = time.monotonic()
    with open(out_f, "wb") as so, open(err_f, "wb") as se:
        p = subprocess.Popen([python, "-m", "ctxbench", *argv], cwd=cwd, env=full_env, stdout=so, stderr=se,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    try:  # children left behind (dataloader workers, ...) go with the group
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return {"rc": p.returncode, "timed_out": timed_out.is_set(), "seconds": round(time.monotonic() - t0, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "stdout": out_f.read_text(errors="replace"),
            "stderr": err_f.read_text(errors="replace")}


def last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


# ---- classification --------------------------------------------------------------------------------

def recovered(case: bic.Case, out: str, work: Path) -> bool:
    """The case's recovery check, on the output with the case's folder named ``<work>`` (its path holds the
    case id, which may contain the very word the check looks for)."""
    if case.recovery is None:
        return False
    out = out.replace(str(work), "<work>")
    if callable(case.recovery):
        return bool(case.recovery(out, work))
    return re.search(case.recovery, out) is not None


def names_something(line: str, expect: list[str]) -> bool:
    """The error line names the case's file or key (any of ``expect``; without any: a quote, path or key=)."""
    low = line.lower()
    if expect:
        return any(e.lower() in low for e in expect if e)
    return bool(re.search(r"['\"/=]|\bline \d+|\bfield\b", line))


def classify(case: bic.Case, res: dict[str, Any], work: Path, expect: list[str]) -> tuple[str, str]:
    """(outcome, detail) of one finished command."""
    err, rc = res["stderr"], res["rc"]
    if (work / bic.MARKER).exists():
        return "EXECUTED", f"the payload created {work / bic.MARKER}"
    if res["timed_out"]:
        return "timeout", f"killed after {res['seconds']} s"
    if case.control:
        return ("ok", "") if rc == 0 else ("control_failed", f"exit {rc}")
    if case.mem_bound_mb and res["peak_rss_mb"] > case.mem_bound_mb:
        return "accepted", f"peak RSS {res['peak_rss_mb']} MiB > bound {case.mem_bound_mb} MiB (exit {rc})"
    if rc == 0:
        if case.ok_if_success and recovered(case, res["stdout"] + "\n" + err, work):
            return "recovered", ""
        return "accepted", "exit 0" + (" (recovery not reported)" if case.ok_if_success else "")
    if rc < 0:
        return "crash", f"killed by signal {-rc}"
    if "Traceback" in err:
        return "traceback", ""
    line = last_line(err)
    if not line.startswith("ctxbench: error:"):
        return "unclear", f"exit {rc}"
    if not names_something(line, expect):
        return "vague", f"names none of {expect}"
    if case.must_recover:
        return "not_recovered", "a clear error where the documented recovery was due"
    return "clear", ""


# ---- fixtures: the real runs that run-file cases corrupt --------------------------------------------

def build_fixtures(ctx: dict, needs: set[str], args: argparse.Namespace, server: FakeServer) -> dict[str, str]:
    """The base LoCoMo file always; the train / eval runs the selected cases need. Returns errors by name."""
    fx = Path(ctx["fixtures"])
    (fx / "base_locomo.json").write_text(bic.locomo_text(ctx))
    errors: dict[str, str] = {}
    runs = {
        "train_one": bic.TRAIN_RUN + ["trainer.stop_after=2", "hydra.run.dir={fixtures}/train_one"],
        "train_two": bic.TRAIN_RUN + ["trainer.stop_after=4", "hydra.run.dir={fixtures}/train_two"],
        "eval_run": [a.replace("{work}/run_cache", "{fixtures}/eval_run_cache") for a in bic.EVAL_RUN]
        + ["limit=2", "hydra.run.dir={fixtures}/eval_run"],
    }
    for name in sorted(needs):
        work = fx / f"_{name}"
        work.mkdir()
        vals = dict(ctx, work=str(work), url=server.url("ok"))
        res = run_command(args.python, [a.format(**vals) for a in runs[name]], Path(args.repo), work, 600,
                          env={"CTXBENCH_CACHE": str(fx / "cache")})
        if res["rc"] != 0:
            errors[name] = last_line(res["stderr"]) or f"exit {res['rc']}"
        print(f"fixture {name}: exit {res['rc']} in {res['seconds']} s", flush=True)
    return errors


# ---- one case --------------------------------------------------------------------------------------

def run_case(case: bic.Case, ctx: dict, args: argparse.Namespace, server: FakeServer,
             fixture_errors: dict[str, str]) -> dict[str, Any]:
    work = Path(ctx["root"]) / "cases" / case.id
    work.mkdir(parents=True)
    vals = dict(ctx, work=str(work), url=server.url(case.server))
    argv = [a.format(**vals) for a in case.argv]
    expect = [e.format(**vals) for e in case.expect]
    rec: dict[str, Any] = {"id": case.id, "group": case.group, "description": case.description,
                           "command": "python -m ctxbench " + shlex.join(argv)}
    missing = [n for n in case.needs if n in fixture_errors]
    if missing:
        rec.update(exit_code=None, outcome="skipped", last_stderr_line=f"fixture {missing[0]} failed: "
                   f"{fixture_errors[missing[0]]}", seconds=0.0, peak_rss_mb=0)
        return rec
    try:
        if case.make:
            case.make(work, dict(vals, work=work, fixtures=Path(ctx["fixtures"])))
        res = run_command(args.python, argv, Path(args.repo), work, case.timeout or args.timeout, case.env)
        outcome, detail = classify(case, res, work, expect)
        rec.update(exit_code=res["rc"], outcome=outcome, last_stderr_line=last_line(res["stderr"])[:500],
                   seconds=res["seconds"], peak_rss_mb=res["peak_rss_mb"])
        if detail:
            rec["detail"] = detail
        if outcome not in GOOD:
            rec["stderr_tail"] = [ln[:300] for ln in res["stderr"].strip().splitlines()[-4:]]
            rec["stdout_tail"] = [ln[:300] for ln in res["stdout"].strip().splitlines()[-2:]]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return rec


# ---- reports ----------------------------------------------------------------------------------------

def counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for r in records:
        if r["outcome"] in ("ok", "control_failed"):
            continue
        table.setdefault(r["group"], {}).setdefault(r["outcome"], 0)
        table[r["group"]][r["outcome"]] += 1
    return table


def markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    table = counts(records)
    cols = [o for o in OUTCOMES if any(o in row for row in table.values())] + ["skipped"] * any(
        "skipped" in row for row in table.values())
    lines = [f"# Bad input sweep — {meta['repo']} @ {meta['commit']}", "",
             f"{meta['date']}; {meta['cases']} cases ({meta['controls']} controls) in {meta['seconds']} s, "
             f"--jobs {meta['jobs']}; python {meta['python']}.", "",
             "| group | " + " | ".join(cols) + " | total |", "|---" * (len(cols) + 2) + "|"]

    def row(name: str, c: dict[str, int]) -> str:
        return f"| {name} | " + " | ".join(str(c.get(k, 0)) for k in cols) + f" | {sum(c.values())} |"

    for g in bic.GROUPS:
        if g in table:
            lines.append(row(g, table[g]))
    for name, groups in (("**inputs**", bic.INPUT_GROUPS), ("**run files**", ("runfiles",))):
        total: dict[str, int] = {}
        for g in groups:
            for k, v in table.get(g, {}).items():
                total[k] = total.get(k, 0) + v
        lines.append(row(name, total))
    controls = [r for r in records if r["outcome"] in ("ok", "control_failed")]
    lines += ["", f"Controls (valid inputs, must succeed): {sum(r['outcome'] == 'ok' for r in controls)}/"
              f"{len(controls)} ok" + "".join(f"; **{r['id']} failed**: `{r['last_stderr_line']}`"
                                                for r in controls if r["outcome"] != "ok")]
    lines += ["", f"Checkout untouched by the sweep: {meta['repo_untouched']}.", "",
              "## Not clear", "", "| case | outcome | exit | last stderr line / detail |", "|---|---|---|---|"]
    for r in records:
        if r["outcome"] not in GOOD and r["outcome"] != "control_failed":
            msg = r.get("last_stderr_line") or ""
            if r.get("detail"):
                msg = f"{r['detail']}; {msg}" if msg else r["detail"]
            msg = msg.replace("|", "\\|").replace("`", "'")[:300]
            lines.append(f"| `{r['id']}` — {r['description']} | {r['outcome']} | {r['exit_code']} | {msg} |")
    return "\n".join(lines) + "\n"


def repo_state(repo: Path, out: Path) -> str:
    """What git sees in the checkout (untracked and ignored files included, the reports' folder left out),
    to check the sweep left it alone."""
    r = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=repo,
                       capture_output=True, text=True)
    skip = out.relative_to(repo).as_posix() if out.is_relative_to(repo) else None
    lines = [ln for ln in r.stdout.splitlines() if "__pycache__" not in ln and not ln.endswith(".pyc")
             and not (skip and ln[3:].startswith(skip))]
    return "\n".join(sorted(lines))


def commit_of(repo: Path) -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
    return r.stdout.strip() or "?"


# ---- main -------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(HERE.parent), help="the checkout whose `python -m ctxbench` runs")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None, help="where the reports go (default: REPO/outputs/bad_input_sweep)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", action="append", default=None,
                    help="a group (or a case id prefix, e.g. dialsim.os_); may repeat")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per case")
    ap.add_argument("--shared", default=None, help="the shared data folder (default: REPO/../shared)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folders (printed at the end)")
    return ap.parse_args(argv)


def select(cases: list[bic.Case], only: list[str] | None) -> list[bic.Case]:
    if not only:
        return cases
    return [c for c in cases if any(c.group == o or c.id.startswith(o) for o in only)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.repo = str(Path(args.repo).resolve())
    repo = Path(args.repo)
    shared = Path(args.shared).resolve() if args.shared else (repo.parent / "shared").resolve()
    out = Path(args.out).resolve() if args.out else HERE.parent / "outputs" / "bad_input_sweep"
    cases = select(bic.all_cases(), args.only)
    if not cases:
        print(f"no case matches --only {args.only}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="ctxbench-sweep-"))
    (root / "fixtures").mkdir()
    ctx = {"root": str(root), "fixtures": str(root / "fixtures"), "shared": str(shared), "repo": str(repo)}
    before, commit = repo_state(repo, out), commit_of(repo)
    server = FakeServer()
    t0 = time.monotonic()
    try:
        fixture_errors = build_fixtures(ctx, {n for c in cases for n in c.needs}, args, server)
        records: dict[str, dict[str, Any]] = {}

        def one(case: bic.Case) -> None:
            rec = run_case(case, ctx, args, server, fixture_errors)
            records[case.id] = rec
            print(f"[{len(records):3d}/{len(cases)}] {rec['outcome']:10s} {case.id}  "
                  f"{rec.get('last_stderr_line', '')[:110]}", flush=True)

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(one, [c for c in cases if not c.exclusive]))
        for c in cases:
            if c.exclusive:
                one(c)
    finally:
        server.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    ordered = [records[c.id] for c in cases]
    untouched = "yes" if repo_state(repo, out) == before else "NO (git status changed during the sweep)"
    if commit_of(repo) != commit:
        commit += f" → {commit_of(repo)} (HEAD MOVED DURING THE SWEEP: the counts mix two versions)"
    meta = {"repo": str(repo), "commit": commit, "python": args.python,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cases": len(ordered),
            "controls": sum(c.control for c in cases), "seconds": round(time.monotonic() - t0),
            "jobs": args.jobs, "repo_untouched": untouched}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bad_input_sweep.json").write_text(json.dumps({"meta": meta, "counts": counts(ordered),
                                                          "cases": ordered}, indent=1) + "\n")
    (out / "bad_input_sweep.md").write_text(markdown(ordered, meta))
    print(f"wrote {out / 'bad_input_sweep.md'} and bad_input_sweep.json" + (f" (temp kept: {root})" * args.keep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
