"""Where each dataset comes from (URLs, hub ids, checksums) and where its files land locally.

``locate`` turns ``dataset.path`` (or the default download location) into an existing file, or a
DataError that tells the user to run ``python -m ctxbench data download NAME``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ctxbench.data.errors import DataError
from ctxbench.data.paths import candidates, data_root, resolve


@dataclass(frozen=True)
class RemoteFile:
    filename: str  # written to data/downloads/<filename>
    url: str
    sha256: str | None = None  # None where no fixed checksum is published


@dataclass(frozen=True)
class Source:
    name: str
    description: str
    files: tuple[RemoteFile, ...] = ()
    hub_id: str | None = None  # Hugging Face dataset id (PwC, Pile)
    hub_splits: tuple[str, ...] = ()
    manual: str = ""  # instructions when no direct download exists
    default_file: str = ""  # what the loader reads by default, relative to data/downloads
    default_limit: int | None = None  # hub rows fetched when the user gives no limit (limit=0: all)
    notes: dict[str, str] = field(default_factory=dict)


SOURCES: dict[str, Source] = {
    "locomo": Source(
        "locomo", "LoCoMo (Maharana et al., ACL 2024): 10 long conversations with 1,986 QA",
        files=(RemoteFile(
            "locomo10.json",
            "https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json",
            # sha256 of the official file (the copy the tests read matches it)
            "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"),),
        default_file="locomo10.json"),
    "longmemeval": Source(
        "longmemeval", "LongMemEval (Wu et al., ICLR 2025): 500 questions over per-question chat haystacks; "
                       "releases S (~264 MB), M (~2.7 GB) and oracle",
        files=tuple(RemoteFile(f, f"https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/main/{f}")
                    for f in ("longmemeval_s_cleaned.json", "longmemeval_oracle.json", "longmemeval_m_cleaned.json")),
        default_file="longmemeval_s_cleaned.json"),
    "pwc": Source(
        "pwc", "PwC, ICAE's Prompt-with-Context set (240k train / 18k test rows)",
        hub_id="sggetao/PwC", hub_splits=("train", "test"), default_file="pwc_test.jsonl"),
    "pile": Source(
        "pile", "The Pile (uncopyrighted subset), streamed from the hub; JSONL {text, meta}",
        hub_id="monology/pile-uncopyrighted", hub_splits=("validation",), default_file="pile_validation.jsonl",
        default_limit=20000),
    "dialsim": Source(
        "dialsim", "DialSim v1.1 (Friends, The Big Bang Theory, The Office) pickles",
        manual=("DialSim is released on Google Drive "
                "(https://drive.google.com/drive/folders/1MhPlUFWuchVZ5E1NQDWfbT7_RW7ozbuk, linked from "
                "https://github.com/jiho283/Simulator): download dialsim_v1.1.zip, extract it with 7-Zip or "
                "`unzip` (it uses Deflate64, which Python's zipfile cannot read) and put "
                "{friends,bigbang,theoffice}_dialsim.pickle in data/downloads/dialsim/ — or pass "
                "url=<direct link to a .pickle> to this command"),
        default_file="dialsim/friends_dialsim.pickle"),
}


def downloads_dir() -> Path:
    return data_root() / "downloads"


def default_path(name: str) -> Path:
    return downloads_dir() / SOURCES[name].default_file


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(path: str) -> bool:
    """``owner/name`` with no file extension and nothing on disk by that name."""
    return bool(_HUB_ID.match(path)) and not Path(path).suffix \
        and not any(c.exists() for c in candidates(path))


def locate(path: str | os.PathLike | None, name: str) -> Path:
    """The file for ``dataset.path`` (absolute, cwd- or repo-relative), or the default download."""
    hint = (f"download it with `python -m ctxbench data download {name}` or set dataset.path=/path/to/file"
            if name in SOURCES else "set dataset.path=/path/to/file")
    if path in (None, ""):
        if name not in SOURCES:
            raise DataError(f"dataset {name}", f"no dataset.path given; {hint}")
        cand = default_path(name)
        if cand.exists():
            return cand
        raise DataError(cand, f"not found; {hint}")
    return resolve(path, hint=hint)
