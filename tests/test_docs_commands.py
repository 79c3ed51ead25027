"""Every ``python -m ctxbench ...`` line in README.md and docs/*.md composes, so a renamed key breaks the build.

Each line goes through the CLI's own compose-time checks (``ctxbench.__main__.main``: group choices,
run dirs, key types and bounds, a ``-m`` sweep at its first job) and is then composed once with its Hydra
overrides, as ``--cfg job`` would print it — in-process with Hydra's compose API, since a subprocess
per line would cost the default suite minutes. Nothing runs: ``run_command`` is replaced.

Documentation notation is read as a reader would: ``<run>`` / ``RUN`` / ``NAME`` are placeholders
(a group placeholder takes the group's first option; any other key takes it as a string), ``[key=a|b]`` is an optional key at its first
choice, ``{a,b}`` and ``a|b`` are alternatives (the first is composed), ``...`` is dropped, and
``$D`` is the ``D="..."`` assigned earlier in the same code block. Lines that are not Hydra apps
(``python -m ctxbench.methods.icae_eval``) or name a command this checkout lacks are skipped with
the reason, and listed in a warning, never silently.
"""
from __future__ import annotations

import re
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import ctxbench.__main__ as cli
from ctxbench.config import sweep
from ctxbench.core.paths import conf_dir

REPO = Path(__file__).resolve().parents[1]
CONF = conf_dir()
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PREFIX = "python -m ctxbench"
PLACEHOLDER = re.compile(r"^(PLACEHOLDER|[A-Z][A-Z0-9_]*)$")


@dataclass
class DocLine:
    where: str  # README.md:27
    text: str  # the command as written, shell variables expanded
    skip: str = ""  # why it is not composed, or "" to compose it


def _code_lines(text: str):
    """(line number, line, shell variables set so far in its block) for every fenced code line
    (backslash continuations joined; ``NAME="..."`` lines recorded, not yielded) and every inline
    `python -m ctxbench ...` span outside the blocks."""
    in_block, env, pending, start = False, {}, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block, env, pending = not in_block, {}, ""
            continue
        if not in_block:
            for span in re.findall(r"`(" + re.escape(PREFIX) + r"[ .][^`]*)`", line):
                yield n, span, {}
            continue
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full, pending = pending + line, ""
        m = re.match(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)\s*(#.*)?$", full)
        if m:
            env[m.group(1)] = m.group(2).strip("\"'")
            continue
        yield start, full, dict(env)


def _expand(line: str, env: dict[str, str]) -> tuple[str, str]:
    """The line with ``$VAR`` / ``${VAR}`` from its block, and the name of one it could not expand."""
    missing = []

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in env:
            return env[name]
        missing.append(name)
        return m.group(0)

    out = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", sub, line)
    return out, (missing[0] if missing else "")


def doc_lines() -> list[DocLine]:
    found = []
    for path in DOCS:
        rel = path.relative_to(REPO).as_posix()
        for n, line, env in _code_lines(path.read_text(encoding="utf-8")):
            at = line.find(PREFIX)
            if at < 0:
                continue
            cmd, missing = _expand(line[at:], env)
            where = f"{rel}:{n}"
            module = cmd[len("python -m "):].split()[0]
            if module != "ctxbench":
                found.append(DocLine(where, cmd, f"python -m {module} is not a Hydra app (a side CLI)"))
            elif missing:
                found.append(DocLine(where, cmd, f"${missing} is not set in its code block"))
            else:
                found.append(DocLine(where, cmd))
    return found


def argv_of(cmd: str) -> list[str]:
    """The CLI arguments a reader would type for a documented command line (see the module docstring)."""
    cmd = re.sub(r"<[^<>]*>", "PLACEHOLDER", cmd.replace("\\|", "|"))  # a\|b in a table cell
    tokens = shlex.split(cmd, comments=True)[3:]  # drop python -m ctxbench
    argv = []
    for tok in tokens:
        if tok == "..." or tok.endswith("..."):
            continue
        if tok.startswith("[") and tok.endswith("]") and "=" in tok:  # [scale=cpu|paper]: optional key
            tok = tok[1:-1]
        if tok.startswith("{") and tok.endswith("}"):  # {locomo,pwc}: alternatives
            tok = tok[1:-1].split(",")[0]
        key, eq, value = tok.partition("=")
        if eq and "|" in value and not value.startswith(("'", '"')):  # a|b: alternatives
            value = value.split("|")[0]
        if eq and PLACEHOLDER.match(value) and (CONF / key.lstrip("+~")).is_dir():
            value = sorted(p.stem for p in (CONF / key.lstrip("+~")).glob("*.yaml"))[0]
        argv.append(f"{key}{eq}{value}" if eq else tok)
    return argv


def compose_job(command: str, argv: list[str]) -> None:
    """What ``--cfg job`` prints, composed in-process with Hydra's own overrides, at a sweep's first job.

    The CLI's check composed everything else already; only lines with ``hydra.``/``hydra/`` overrides,
    which that check leaves to Hydra, are composed again here.
    """
    from hydra import compose, initialize_config_dir

    overrides, multirun, args = [], False, iter(argv)
    for a in args:
        if a in cli.VALUE_FLAGS:
            next(args, None)
        elif a in ("-m", "--multirun"):
            multirun = True
        elif not a.startswith("-"):
            overrides.append(a)
    if not any(a.lstrip("+~").startswith(("hydra.", "hydra/")) for a in overrides):
        return
    if multirun:
        overrides = first_job(overrides)[0]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF), job_name=command):
        compose(config_name=command, overrides=overrides, return_hydra_config=True)


def first_job(overrides: list[str], _all=sweep.sweep_combinations) -> list[list[str]]:
    """A ``-m`` line's first job only: the keys are the same in every job, and each compose costs ~0.5 s."""
    return _all(overrides)[:1]


def unique_commands(lines: list[DocLine]) -> list[DocLine]:
    """One test per distinct command line (the README repeats some of docs/); skips decided here, so they are listed."""
    seen: dict[tuple[str, ...], DocLine] = {}
    out = []
    for d in lines:
        if not d.skip:
            argv = argv_of(d.text)
            if not argv or argv[0] not in cli.COMMANDS:
                d.skip = f"command {argv[0] if argv else ''!r} is not in ctxbench.__main__.COMMANDS in this checkout"
            elif tuple(argv) in seen:
                seen[tuple(argv)].where += f", {d.where}"
                continue
            else:
                seen[tuple(argv)] = d
        out.append(d)
    return out


LINES = unique_commands(doc_lines())


def test_the_docs_have_commands():
    """The scan finds the README's commands (an empty scan would pass every other test here)."""
    assert sum(1 for d in LINES if "README.md" in d.where and not d.skip) >= 5
    skipped = [f"{d.where}: {d.text}  -- {d.skip}" for d in LINES if d.skip]
    if skipped:
        warnings.warn("documented commands not composed:\n  " + "\n  ".join(skipped), stacklevel=1)


@pytest.fixture(autouse=True)
def _example_plugin_installed(tmp_path_factory, monkeypatch):
    """docs/plugins.md's example package installed (as pip would), so its documented commands compose too."""
    from ctxbench.config import plugin_options
    from ctxbench.core import registry
    from tests.plugin_dist import example_installed

    for path in example_installed(tmp_path_factory.mktemp("site")):
        monkeypatch.syspath_prepend(path)
    monkeypatch.delenv("CTXBENCH_PLUGINS", raising=False)  # what a documented sweep line sets, taken back after
    registry.forget_plugins()
    yield
    registry.forget_plugins()
    plugin_options.forget()


def cli_error(cmd: str, monkeypatch, capsys) -> str | None:
    """Why the CLI would refuse this documented line before running it, or None when it composes."""
    argv = argv_of(cmd)
    composed = []
    monkeypatch.setattr(cli, "run_command", lambda command, rest: composed.append((command, rest)))
    monkeypatch.setattr(cli, "quiet_cpu_warnings", lambda: None)
    monkeypatch.setattr(sweep, "sweep_combinations", first_job)  # a renamed key is in every job: one is enough
    try:
        cli.main([*argv, "--cfg", "job"])
    except SystemExit as e:
        return f"exit {e.code}: {capsys.readouterr().err.strip()}"
    assert composed, f"`{cmd}`: the CLI did not reach the run"
    compose_job(*composed[0])
    return None


@pytest.mark.parametrize("doc", LINES, ids=[d.where.split(",")[0] for d in LINES])
def test_documented_command_composes(doc: DocLine, monkeypatch, capsys):
    if doc.skip:
        pytest.skip(doc.skip)
    error = cli_error(doc.text, monkeypatch, capsys)
    assert error is None, f"{doc.where}: `{doc.text}` fails the CLI's checks ({error})"


@pytest.mark.parametrize("cmd", ["python -m ctxbench train trainer.max_step=3",
                                 "python -m ctxbench eval -m memory=rag memory.top_k=1,2",
                                 "python -m ctxbench train trainer.max_steps=abc",
                                 "python -m ctxbench eval memory=mem1 dataset=locomo_sample"])
def test_a_renamed_key_breaks_the_build(cmd, monkeypatch, capsys):
    """The check is the CLI's: an unknown key, a wrongly typed value or an unknown option fails it."""
    assert cli_error(cmd, monkeypatch, capsys)


OTHER_BRANCH_PAGES = {"docs/config.md", "docs/reproduce.md"}  # written by other work in progress: may be absent here


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def test_relative_links_and_anchors_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists, and a heading that exists in it."""
    broken, pending = [], []
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s):, mailto:
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
            if not dest.exists():
                (pending if rel in OTHER_BRANCH_PAGES else broken).append(f"{path.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.name}: {target} (no such heading)")
    if pending:
        warnings.warn("links to pages not in this checkout yet: " + ", ".join(pending), stacklevel=1)
    assert not broken, "broken links:\n  " + "\n  ".join(broken)
