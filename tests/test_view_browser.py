"""The viewer in a real browser (Debian's headless Chromium): the rows render, the filters narrow them
(through the page's own controls), the two-run diff shows, and a 200-question run shows its first rows
well under a second after load. Screenshots are saved (into $CTXBENCH_VIEW_SHOTS too, when set: that
is how docs/img/viewer_*.png were made). Skipped when no chromium binary is found."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.view_runs import make_run

pytestmark = pytest.mark.slow
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
FIRST_ROWS_MS = 1000  # "well under a second": measured ~50-150 ms for 200 questions on 2 CPU cores

# driven through the page's own controls and event handlers, after the page rendered (added by the test only)
DRIVE = """<script>
(function () {
  const d = document.body.dataset, count = () => document.getElementById("count").dataset.shown;
  const set = (id, v, ev) => { const el = document.getElementById(id); if (el.type === "checkbox") el.checked = v; else el.value = v;
                               el.dispatchEvent(new Event(ev)); };
  let t0 = performance.now(); set("f-cat", "temporal", "change"); d.filterMs = (performance.now() - t0).toFixed(1);
  d.afterCat = count(); d.rowsAfterCat = document.querySelectorAll("#rows tr.q").length;
  set("f-metric", "llm_judge", "change"); set("f-verdict", "wrong", "change"); d.afterWrong = count();
  set("f-cat", "", "change"); set("f-verdict", "", "change"); set("f-q", "speaker 7 say", "input"); d.afterSearch = count();
  set("f-q", "", "input"); d.afterClear = count();
})();
</script>"""


def chromium(url: str, tmp: Path, shot: Path | None = None, size: str = "1400,1000") -> str:
    args = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={size}",
            f"--user-data-dir={tmp / 'profile'}", "--no-first-run", "--disable-extensions"]
    args += [f"--screenshot={shot}"] if shot else ["--dump-dom"]
    r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def attr(dom: str, name: str) -> str:
    m = re.search(rf'data-{name}="([^"]*)"', dom)
    assert m, f"data-{name} not in the page (did the script run?)"
    return m.group(1)


def page(run_dirs: list[Path], out: Path) -> tuple[Path, dict]:
    from ctxbench.report.view import write_view

    path = write_view([str(d) for d in run_dirs], out)
    text = path.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script id="payload" type="application/json">(.*?)</script>', text, re.S).group(1))
    return path, data


def save_shot(src: Path, name: str) -> None:
    dest = os.environ.get("CTXBENCH_VIEW_SHOTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, Path(dest) / name)


@pytest.fixture(autouse=True)
def _need_chromium():
    if CHROMIUM is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install -y chromium)")


def test_a_200_question_run_renders_fast_and_its_filters_narrow_the_rows(tmp_path):
    run = make_run(tmp_path / "rag", n=200, context_chars=5000)
    html, data = page([run], tmp_path / "one.html")
    rows = data["runs"][0]["rows"]
    dom = chromium(html.as_uri(), tmp_path)
    assert attr(dom, "shown") == "200" and len(re.findall(r'<tr class="q" data-id="[^"$]', dom)) == 100  # first page of 100
    first_ms = float(attr(dom, "first-rows-ms"))
    assert first_ms < FIRST_ROWS_MS, f"first rows after {first_ms} ms"
    print(f"\n200-question run: first rows {first_ms} ms after navigation start")

    driven = tmp_path / "driven.html"
    driven.write_text(html.read_text(encoding="utf-8").replace("</body>", DRIVE + "</body>"), encoding="utf-8")
    dom = chromium(driven.as_uri(), tmp_path)
    temporal = [r for r in rows if r["category"] == "temporal"]
    assert attr(dom, "after-cat") == str(len(temporal)) == attr(dom, "rows-after-cat")
    assert attr(dom, "after-wrong") == str(sum(r["scores"]["llm_judge"] == 0 for r in temporal))
    assert attr(dom, "after-search") == "1" and attr(dom, "after-clear") == "200"
    assert float(attr(dom, "filter-ms")) < FIRST_ROWS_MS
    print(f"filter by category: {attr(dom, 'filter-ms')} ms")

    # a filter in the address (#...) is what a linked view opens with
    dom = chromium(html.as_uri() + "#metric=f1&verdict=correct&thr=0.5", tmp_path)
    assert attr(dom, "shown") == str(sum(r["scores"]["f1"] >= 0.5 for r in rows))
    shot = tmp_path / "viewer_one_run.png"
    chromium(html.as_uri() + f"#open={rows[1]['id']}", tmp_path, shot, size="1400,1500")
    assert shot.stat().st_size > 10_000
    save_shot(shot, shot.name)


def test_two_runs_show_the_paired_difference_and_the_disagreements(tmp_path):
    ids = [f"conv-{i // 40}_q{i}" for i in range(120)]
    a = make_run(tmp_path / "rag", ids=ids, seed=1)
    b = make_run(tmp_path / "mem0", ids=ids[:118] + ["conv-9_q999"], seed=2, system="memory=mem0", samples=False)
    html, data = page([a, b], tmp_path / "two.html")
    pair = data["pair"]
    dom = chromium(html.as_uri() + "#disagree=1", tmp_path)
    assert 'id="pair-table"' in dom and "B − A, paired over the 118 questions" in dom
    assert attr(dom, "shown") == str(len(pair["disagree"])) and pair["disagree"]
    assert "2 question(s) only in run A" in dom and "1 question(s) only in run B" in dom
    shown = set(re.findall(r'<tr class="q" data-id="([^"$]+)"', dom))
    assert shown == {d["id"] for d in pair["disagree"][:100]}
    shot = tmp_path / "viewer_two_runs.png"
    chromium(html.as_uri() + f"#disagree=1&open={pair['disagree'][0]['id']}", tmp_path, shot, size="1400,1700")
    assert shot.stat().st_size > 10_000
    save_shot(shot, shot.name)
