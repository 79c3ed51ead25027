"""``python -m ctxbench {train,eval,score,bench,report,data,ls,export,reproduce,view} [hydra overrides]``.

Each subcommand is a Hydra app whose primary config is ``conf/<command>.yaml``. The subcommand is
popped from argv before Hydra sees it. This layer only composes: the work is in train.py,
evaluate.py, bench/, report/, data/, reproduce/.
"""
from __future__ import annotations

import importlib
import os
import sys

from ctxbench.core.errors import CtxbenchError  # noqa: F401 - re-exported: ctxbench.__main__.CtxbenchError
from ctxbench.core.paths import conf_dir

COMMANDS = {
    "train": ("ctxbench.training.loop", "main"),
    "eval": ("ctxbench.evaluation.evaluator", "main"),
    "score": ("ctxbench.evaluation.evaluator", "score_main"),
    "bench": ("ctxbench.bench", "main"),
    "report": ("ctxbench.report", "main"),
    "data": ("ctxbench.data.cli", "main"),
    "ls": ("ctxbench.report.listing", "main"),
    "export": ("ctxbench.export", "main"),
    "reproduce": ("ctxbench.reproduce", "main"),
    "view": ("ctxbench.report.view", "main"),
    "check": ("ctxbench.check", "main"),
    "new": ("ctxbench.scaffold", "main"),
}
#: commands that load no model: the CLI does not import torch for them (quiet_cpu_warnings is skipped).
#: No command imports torch before Hydra hands it the composed config (``--help`` and ``--cfg job`` never do).
TORCH_FREE = {"view", "ls", "report", "score", "data", "new"}
CONF_DIR = conf_dir()
USAGE = ("usage: python -m ctxbench {" + ",".join(COMMANDS) + "} [-m] [key=value ...]\n"
         "       python -m ctxbench <command> --help | --cfg job")


def _fail(msg: str) -> "None":
    print(f"ctxbench: error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def split_at_dashes(argv: list[str]) -> tuple[list[str], list[str]]:
    """A side CLI's own flags, and what follows ``--`` (Hydra overrides it passes on to the commands it runs)."""
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def check_group_choices(argv: list[str]) -> None:
    """Catch ``group=option`` typos before Hydra, with a "did you mean" and the list.

    The options are what Hydra's config search path holds (ctxbench's ``conf/``, ``hydra.searchpath=``
    additions, the ConfigStore: plug-ins' options), asked of Hydra itself (:mod:`ctxbench.config.options`).
    """
    from ctxbench.config.options import group_options, is_group
    from ctxbench.core.registry import suggest

    search = searchpath_overrides(argv)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        if key.startswith("hydra/"):  # Hydra's groups also hold its plugins' options (hydra/launcher=submitit_slurm)
            continue  # Hydra checks them and lists every option
        if "." in key or value in ("", "null") or "(" in value or not is_group(key, search):
            continue  # glob(...), choice(...): Hydra's sweep functions, expanded by check_overrides
        options = group_options(key, search)
        if key in PLUGIN_GROUPS:  # what installed plug-ins offer, for the "did you mean" too
            options = sorted(set(options) | set(plugin_options_of(key)))
        for v in value.split(","):  # multirun lists: method=a,b
            if v not in options:
                _fail(f"unknown {key} {v!r}.{suggest(v, options)}")


PLUGIN_GROUPS = ("memory", "method", "dataset")


def plugin_options_of(group: str) -> list[str]:
    """The usable plug-in names a group can select (metadata only, nothing imported)."""
    from ctxbench.core.registry import plugin_names

    return [n for n, p in plugin_names(group).items() if p.problem is None]


def searchpath_overrides(argv: list[str]) -> list[str]:
    """The folders and packages ``hydra.searchpath=[...]`` adds to the config search path."""
    out: list[str] = []
    for a in argv:
        if a.startswith("hydra.searchpath="):
            out += [p.strip().strip("'\"") for p in a.partition("=")[2].strip("[]").split(",") if p.strip()]
    return out


def use_plugins(argv: list[str]) -> list[str]:
    """Load what ``plugins=`` / ``CTXBENCH_PLUGINS`` name and make every plug-in option the overrides select
    composable (``memory=lastturns``); ``plugins=`` itself is taken out of the overrides (it is no config key:
    results.json records the plug-ins a run used, with their version or sha256)."""
    from ctxbench.config.plugin_options import GROUP_OF_KIND, add_option
    from ctxbench.core import plugins, registry

    given = [a.partition("=")[2] for a in argv if a.startswith("plugins=")]
    rest = [a for a in argv if not a.startswith("plugins=")]
    specs = plugins.requested(",".join(given))
    plugins.use(specs)
    if given and any(a in ("-m", "--multirun") for a in argv):  # sweep jobs a launcher starts in other processes
        os.environ[plugins.ENV] = ",".join(plugins.resolved(specs))
    for arg in rest:
        key, _, value = arg.partition("=")
        kind = key.lstrip("+~")
        if arg.startswith("-") or kind not in GROUP_OF_KIND or "(" in value:
            continue
        for v in value.split(","):
            p = registry.plugin_names(kind).get(v)
            if p is not None and not (CONF_DIR / kind / f"{v}.yaml").exists():
                add_option(kind, v, registry.get(kind, v))
    return rest


def check_run_dirs(command: str, argv: list[str]) -> None:
    """The run folder (``hydra.run.dir=``, or ``hydra.sweep.dir=`` under ``-m``, or the command's default)
    must be a folder this process can write: a file in the way, a read-only folder (permissions or a
    read-only disk) or, when it exists, a read-only ``.hydra/`` or log inside is one line here, before
    Hydra fails to mkdir or to open its log ("Unable to configure handler 'file'")."""
    from ctxbench.core.write_faults import folder_problem

    key = "hydra.sweep.dir" if any(a in ("-m", "--multirun") for a in argv) else "hydra.run.dir"
    given = [a.partition("=")[2] for a in argv if a.partition("=")[0] == key]
    value = given[-1] if given else _default_run_dir(command, key)
    folder = _static_part(value or "")
    if not folder or (not given and folder == "."):  # "." by default: the command writes no run folder
        return
    problem = folder_problem(folder) or _inside_problem(folder)
    if problem:
        where = f"{key}={value}" if given else f"the run folder {value} ({key} by default)"
        _fail(f"{where}: {problem} (a run folder is created there)")


def _default_run_dir(command: str, key: str) -> str | None:
    """``hydra.run.dir`` / ``hydra.sweep.dir`` as conf/<command>.yaml sets it (None: Hydra's own default)."""
    import yaml

    try:
        node = yaml.safe_load((CONF_DIR / f"{command}.yaml").read_text(encoding="utf-8")) or {}
        for part in key.split("."):
            node = node[part]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None
    return node if isinstance(node, str) else None


def _static_part(value: str) -> str:
    """The folder a run dir template surely lies in: its part before the first ``${`` interpolation."""
    if "$" not in value:
        return value
    head = value[:value.index("$")]
    return head if head.endswith("/") else os.path.dirname(head)


def _inside_problem(folder: str) -> str | None:
    """An existing run folder's ``.hydra/`` and ``*.log`` (what Hydra rewrites first) must be writable."""
    if not os.path.isdir(folder):
        return None
    hydra_dir = os.path.join(folder, ".hydra")
    inside = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".log")]
    if os.path.isdir(hydra_dir):
        inside += [hydra_dir] + [os.path.join(hydra_dir, n) for n in os.listdir(hydra_dir)]
    bad = next((p for p in inside if not os.access(p, os.W_OK)), None)
    return f"{bad} is not writable (permission denied)" if bad else None


def run_command(command: str, argv: list[str]) -> None:
    import hydra

    mod_name, fn_name = COMMANDS[command]

    def task(cfg) -> None:
        from ctxbench.core.secrets import redact_override

        _scrub_hydra_outputs()
        if command not in TORCH_FREE:
            quiet_cpu_warnings()
        sys.argv[:] = [redact_override(a) for a in sys.argv]  # wandb and others record argv
        fn = getattr(importlib.import_module(mod_name), fn_name)
        try:
            fn(cfg)
        except user_errors() as e:  # noqa: B030 - a tuple built at call time
            _fail(_one_line(e))
        except Exception as e:  # Hydra would print the overrides (keys included) with the traceback
            import traceback

            from ctxbench.core.write_faults import disk_fault

            if disk_fault(e) is not None:  # a full or read-only disk under a writer that does not name it
                _fail(str(disk_fault(e)))

            from ctxbench.core.secrets import scrub_text

            print(scrub_text(traceback.format_exc()), file=sys.stderr, end="")
            raise SystemExit(1) from None

    task.__module__ = "ctxbench.__main__"
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=command)(task)
    sys.argv = [f"ctxbench {command}"] + _rank_safe(command, argv)
    app()


def _scrub_hydra_outputs() -> None:
    """Hydra saved the config and overrides already; take any secret back out of them."""
    try:
        from hydra.core.hydra_config import HydraConfig

        out = HydraConfig.get().runtime.output_dir
    except Exception:
        return
    from ctxbench.core.secrets import scrub_run_files

    scrub_run_files(out)


def _rank_safe(command: str, argv: list[str]) -> list[str]:
    """Under ``accelerate launch``: one pinned run dir for all ranks, ``.hydra/`` on rank 0 only."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return argv
    extra = []
    if not any(a.startswith("hydra.run.dir=") for a in argv):
        run_id = os.environ.get("CTXBENCH_RUN_ID") or f"{os.environ.get('MASTER_PORT', '0')}-{os.getppid()}"
        extra.append(f"hydra.run.dir=outputs/{command}/dist-{run_id}")
    if int(os.environ.get("RANK", "0")) != 0:
        extra.append("hydra.output_subdir=null")
    return argv + extra


def user_errors() -> tuple[type[BaseException], ...]:
    """What the CLI prints as one line (exit 2): every project error, and the few library errors a user causes.

    Every error the project raises on purpose is a :class:`ctxbench.core.errors.CtxbenchError` (the test
    tests/test_errors_cli.py walks the package to keep it so); anything else is a bug and keeps its
    traceback (exit 1).
    """
    from omegaconf.errors import MissingMandatoryValue

    return (CtxbenchError, FileNotFoundError, MissingMandatoryValue)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        print("\ncommands: " + ", ".join(COMMANDS))
        raise SystemExit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        from ctxbench.core.registry import suggest

        _fail(f"unknown command {command!r}.{suggest(command, list(COMMANDS))}")
    if command in ("data", "new"):  # `data download locomo` → `action=download name=locomo`, `new memory X` → `kind=memory name=X`
        pos: list[str] = []
        while rest and len(pos) < 2 and "=" not in rest[0] and not rest[0].startswith("-"):
            pos.append(rest.pop(0))
        rest = [f"{k}={v}" for k, v in zip(("action" if command == "data" else "kind", "name"), pos)] + rest
    if command == "report":  # `report sweep=DIR`: conf/sweep/ is a config group, so the folder travels as sweep_dir
        rest = ["sweep_dir=" + a.partition("=")[2] if a.startswith("sweep=") else a for a in rest]
        rest = [quote_list_value(a) for a in rest]  # `report compare=A,B`: one value, not a sweep
        rest = ["judges=true" if a == "judges" else a for a in rest]  # `report judges`: the calibration report
    if command == "view":  # `view RUN [RUN_B]` → `run=RUN run_b=RUN_B`
        pos = []
        while rest and len(pos) < 2 and "=" not in rest[0] and not rest[0].startswith("-"):
            pos.append(rest.pop(0))
        rest = [f"{k}='" + v.replace("'", "\\'") + "'" for k, v in zip(("run", "run_b"), pos)] + rest  # quoted: a comma is no sweep
    if command == "reproduce":  # `reproduce scale=cpu`: conf/scale/ is a config group, so the scale travels as table_scale
        rest = ["table_scale=" + a.partition("=")[2] if a.startswith("scale=") else a for a in rest]
    from ctxbench.config.hints import dashed_key_hint
    from ctxbench.config.schemas import register

    register()  # every schema's defaults into Hydra's ConfigStore, before anything composes
    try:
        rest = use_plugins(rest)
    except CtxbenchError as e:
        _fail(_one_line(e))
    hint = dashed_key_hint(command, rest, CONF_DIR, SKIP_FLAGS | VALUE_FLAGS | CONFIG_FLAGS)  # `--limit 3`
    if hint:
        _fail(hint)
    check_group_choices(rest)
    if any(a in ("--help", "-h") for a in rest):
        print_help(command, rest)
        return
    check_run_dirs(command, rest)
    check_overrides(command, rest)
    run_command(command, rest)


def print_help(command: str, argv: list[str]) -> None:
    """Our own ``--help`` (Hydra's takes 7–8 s to list the groups); the overrides given are composed in."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ctxbench.config.help import help_text

    overrides = [a for a in argv if not a.startswith("-") and "=" in a and not a.startswith(("hydra.", "hydra/"))]
    try:
        print(help_text(command, overrides, CONF_DIR))
    except (HydraException, OmegaConfBaseException) as e:
        _fail(_one_line(e))


LIST_VALUE_KEYS = ("compare=", "reruns=", "decay=", "runs=", "board=", "table=")
PATH_VALUE_KEYS = ("out=",)  # quoted only when Hydra's lexer would refuse it (``out=~/board.md``)


def quote_list_value(arg: str) -> str:
    """``compare=A,B`` → ``compare='A,B'``: Hydra reads an unquoted comma as a sweep; the folders are
    one string, split by the report (``runs=A,B``, a ``board=~/b.yaml`` whose ``~`` Hydra's lexer
    refuses). A value already quoted or bracketed is left as it is."""
    if arg.startswith(PATH_VALUE_KEYS) and arg.partition("=")[2].startswith("~"):
        return "out='" + arg.partition("=")[2].replace("'", "\\'") + "'"
    if not arg.startswith(LIST_VALUE_KEYS):
        return arg
    key, _, value = arg.partition("=")
    if not value or value[0] in "'\"[":
        return arg
    return f"{key}='" + value.replace("'", "\\'") + "'"


def quiet_cpu_warnings() -> None:
    """DeepSpeed warns on import when it finds no GPU; on a CPU machine that is expected."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


# Hydra flags that leave the config untouched (checked as usual), take a value, or replace the config (not checked)
CONFIG_FLAGS = {"-m", "--multirun", "--resolve"}
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p"}
SKIP_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc", "--config-path", "-cp",
              "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}


def check_overrides(command: str, argv: list[str]) -> None:
    """Compose once before Hydra runs so a bad key or a wrongly typed value fails in one line naming it.

    Under ``-m`` every combination of the swept values is composed and checked the same way, before
    any job starts; ``glob(...)`` over a group is expanded over its options, ``interval(...)`` is not
    enumerable and that override is left out of the check.
    """
    overrides, multirun = [], False
    args = iter(argv)
    for a in args:
        if a in SKIP_FLAGS or (a.startswith("-") and a.split("=")[0] in SKIP_FLAGS):
            return
        if a in VALUE_FLAGS:
            next(args, None)
        elif a in CONFIG_FLAGS:
            multirun = multirun or a in ("-m", "--multirun")
        elif a.startswith("-") and not a.startswith("~"):
            return  # a flag this check does not know: let Hydra handle it
        elif not a.startswith("hydra.") and not a.startswith("hydra/"):
            overrides.append(a)
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ctxbench.config.schema import check_types, unknown_key_line
    from ctxbench.config.schemas import register

    register()
    from ctxbench.core.errors import ConfigError
    from ctxbench.config.sweep import sweep_combinations, sweeper_params

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name=command):
        if multirun:
            overrides = overrides + sweeper_params(command, overrides)
        combos = sweep_combinations(overrides) if multirun else [overrides]
        for combo in combos:
            where = _sweep_job(combo, overrides) if len(combos) > 1 else ""
            try:
                check_types(compose(config_name=command, overrides=combo), command)
            except ConfigError as e:  # a wrong type (ConfigTypeError), range or choice
                _fail(f"{e}{where}")
            except (HydraException, OmegaConfBaseException) as e:
                _fail((unknown_key_line(command, combo, e) or _one_line(e)) + where)


def _sweep_job(combo: list[str], overrides: list[str]) -> str:
    swept = [a for a in combo if a not in overrides]
    return f" (in the sweep job {' '.join(swept)})" if swept else ""


def _one_line(e: BaseException) -> str:
    import re

    chain, cur = [], e
    while cur is not None and len(chain) < 5:
        chain.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    msg = "\n".join(chain)
    if isinstance(e, (KeyError,)) and e.args:
        msg = str(e.args[0])
    m = re.search(r"Could not override '([^']+)'", msg)
    if m and "not in struct" in msg:
        key = m.group(1)
        return f"unknown config key {key!r} (use +{key}=... to add a new key)"
    if m and "Missing mandatory value" not in msg:
        detail = next((ln.strip() for ln in chain[-1].splitlines() if ln.strip()), "")
        return f"cannot override {m.group(1)!r}: {detail}"
    return next((ln.strip() for ln in msg.splitlines() if ln.strip()), repr(e))


if __name__ == "__main__":
    main()
