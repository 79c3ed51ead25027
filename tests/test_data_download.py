"""Downloads: atomic write, sha256 check, clear offline errors — with urlopen monkeypatched (no network)."""
from __future__ import annotations

import hashlib
import io
import shutil
from urllib.error import URLError

import pytest

from ctxbench.data import download as dl
from ctxbench.data.errors import DataError
from ctxbench.data.sources import SOURCES


class FakeResponse(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.headers = {"Content-Length": str(len(data))}


def serve(monkeypatch, data: bytes | None = None, error: Exception | None = None):
    calls = []

    def fake_urlopen(req, timeout=None):
        calls.append(req.full_url)
        if error is not None:
            raise error
        return FakeResponse(data)

    monkeypatch.setattr(dl, "urlopen", fake_urlopen)
    return calls


def test_fetch_writes_atomically_and_verifies(tmp_path, monkeypatch):
    body = b'[{"sample_id": "x"}]' * 1000
    serve(monkeypatch, body)
    dest = tmp_path / "sub" / "f.json"
    digest = dl.fetch_url("https://example.invalid/f.json", dest, hashlib.sha256(body).hexdigest())
    assert dest.read_bytes() == body and digest == hashlib.sha256(body).hexdigest()
    assert [p.name for p in dest.parent.iterdir()] == ["f.json"]  # no .part left behind


def test_checksum_mismatch_leaves_nothing(tmp_path, monkeypatch):
    serve(monkeypatch, b"tampered")
    dest = tmp_path / "f.json"
    with pytest.raises(DataError, match="checksum mismatch"):
        dl.fetch_url("https://example.invalid/f.json", dest, "0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_offline_is_one_clear_line(tmp_path, monkeypatch):
    serve(monkeypatch, error=URLError("[Errno -3] Temporary failure in name resolution"))
    with pytest.raises(DataError) as e:
        dl.download("locomo", dest=str(tmp_path / "locomo10.json"), log=lambda m: None)
    msg = str(e.value)
    assert "raw.githubusercontent.com/snap-research/locomo" in msg and "download failed" in msg and "no network" in msg
    assert "\n" not in msg and not (tmp_path / "locomo10.json").exists()


def test_locomo_present_and_verified_needs_no_network(tmp_path, monkeypatch, shared_data):
    calls = serve(monkeypatch, error=AssertionError("no network in tests"))
    shutil.copy(shared_data / "locomo10.json", tmp_path / "locomo10.json")
    logs = []
    out = dl.download("locomo", dest=str(tmp_path), log=logs.append)
    assert out == [tmp_path / "locomo10.json"] and calls == [] and "sha256 ok" in logs[0]
    # the pinned checksum is the official file's
    assert dl.sha256_file(shared_data / "locomo10.json") == SOURCES["locomo"].files[0].sha256


def test_locomo_download_through_mirror(tmp_path, monkeypatch, shared_data):
    calls = serve(monkeypatch, (shared_data / "locomo10.json").read_bytes())
    monkeypatch.setenv("CTXBENCH_DATA", str(tmp_path))
    out = dl.download("locomo", url="https://mirror.invalid/locomo10.json", log=lambda m: None)
    assert out == [tmp_path / "downloads" / "locomo10.json"] and calls == ["https://mirror.invalid/locomo10.json"]


def test_hub_and_manual_sources_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="sggetao/PwC: is a hub dataset but the hub is offline"):
        dl.download("pwc", dest=str(tmp_path), log=lambda m: None)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DataError, match="drive.google.com.*dialsim_v1.1.zip"):
        dl.download("dialsim", log=lambda m: None)
    with pytest.raises(DataError, match="Did you mean 'locomo'"):
        dl.download("locomoo")


def test_dialsim_from_direct_url(tmp_path, monkeypatch):
    serve(monkeypatch, b"\x80\x04}\x94.")
    out = dl.download("dialsim", url="https://mirror.invalid/friends_dialsim.pickle?dl=1", dest=str(tmp_path / "f.pickle"),
                      log=lambda m: None)
    assert out == [tmp_path / "f.pickle"] and out[0].read_bytes() == b"\x80\x04}\x94."


def test_write_jsonl_keeps_keys_and_limit(tmp_path):
    dest = tmp_path / "pwc_test.jsonl"
    rows = iter([{"input": "c", "prompt": "p", "answer": "a", "extra": 1}] * 5)
    assert dl.write_jsonl(rows, dest, ("input", "prompt", "answer"), limit=3) == 3
    assert dest.read_text().splitlines() == ['{"input": "c", "prompt": "p", "answer": "a"}'] * 3


def test_zip_members_extracted(tmp_path, monkeypatch):
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("dialsim_v1.1/friends_dialsim.pickle", b"\x80\x04}\x94.")
        z.writestr("dialsim_v1.1/README.txt", b"hi")
    serve(monkeypatch, buf.getvalue())
    out = dl.download("dialsim", url="https://mirror.invalid/dialsim_v1.1.zip", dest=str(tmp_path / "d.zip"),
                      log=lambda m: None)
    assert out == [tmp_path / "d.zip", tmp_path / "friends_dialsim.pickle"]
    assert (tmp_path / "friends_dialsim.pickle").read_bytes() == b"\x80\x04}\x94."
