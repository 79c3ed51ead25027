"""``python -m ctxbench data ...`` as a user types it (subprocess): stats, download offline, errors."""
from __future__ import annotations

import json


def test_stats_locomo_positional(cli, shared_data, tmp_path):
    r = cli("data", "stats", "locomo", f"path={shared_data / 'locomo10.json'}", f"out={tmp_path / 's.json'}")
    assert r.returncode == 0, r.stderr
    for row in ("| multi-hop | 1 | 282 |", "| temporal | 2 | 321 |", "| open-domain | 3 | 96 |",
                "| single-hop | 4 | 841 |", "| adversarial | 5 | 446 |", "| **all** | | 1986 |",
                "| 10 | 272 | 5882 | 0 | 1986 |", "| malformed_evidence | 6 |", "| adversarial_answer_only | 444 |"):
        assert row in r.stdout
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["by_category"]["adversarial"] == {"id": 5, "n": 446}


def test_stats_key_value_form_json_and_subset(cli):
    r = cli("data", "action=stats", "name=locomo_sample", "format=json", "+dataset.conversations=[demo-2]")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout[r.stdout.index("{"):])
    assert st["samples"] == 1 and st["questions"] == 5


def test_download_offline_is_one_line(cli, tmp_path):
    # port 9 on localhost refuses at once: no network is touched
    r = cli("data", "download", "locomo", "url=http://127.0.0.1:9/locomo10.json", f"dest={tmp_path / 'l.json'}")
    assert r.returncode == 2
    err = r.stderr.strip()
    assert err.startswith("ctxbench: error: http://127.0.0.1:9/locomo10.json: download failed")
    assert len(err.splitlines()) == 1 and not (tmp_path / "l.json").exists()


def test_missing_default_file_and_unknown_name(cli, tmp_path):
    r = cli("data", "stats", "locomo", env={"CTXBENCH_DATA": str(tmp_path)})
    assert r.returncode == 2 and "python -m ctxbench data download locomo" in r.stderr
    r = cli("data", "stats", "locomoo")
    assert r.returncode == 2 and "Did you mean 'locomo'" in r.stderr and "Traceback" not in r.stderr
    r = cli("data", "list", env={"CTXBENCH_DATA": str(tmp_path)})
    assert r.returncode == 0 and "locomo   missing" in r.stdout
