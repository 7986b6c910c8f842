"""pbt.analyze's report as a user sees it: the objective plot leaves a gap where a member's
objective was unknown (no straight line across it), report.html renders the report's links and code
spans, and a real headless browser (Debian's chromium) shows its images loaded and no raw Markdown."""
import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, List

import pytest

from pbt.storage import LineageEntry, Workspace

LR = "train.params.config.learning_rate"
# member 0's objective is unknown at frames 300 and 400 (episodes still running after a restart)
OBJECTIVES = {0: [1.0, 2.0, None, None, 5.0, 6.0], 1: [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}


def workspace(root: Path) -> Path:
    now = time.time()
    for idx, objectives in OBJECTIVES.items():
        ws = Workspace(root, idx, len(OBJECTIVES))
        for iteration, objective in enumerate(objectives, start=1):
            frame = 100 * iteration
            ws.publish(iteration, frame, objective, {LR: 1e-3 * (idx + 1)}, b"checkpoint bytes",
                       episode_returns=[] if objective is None else [objective] * 4, frames_since_replace=frame)
            action = "replace" if (idx, iteration) == (0, 5) else "keep"
            ws.append_lineage(LineageEntry(policy_idx=idx, iteration=iteration, frame=frame, action=action,
                                           objective=objective, donor=1 if action == "replace" else None,
                                           donor_iteration=5 if action == "replace" else None, mode=None
                                           if action == "keep" else "inplace", params_before={LR: 1e-3},
                                           params_after={LR: 2e-3 if action == "replace" else 1e-3},
                                           time=now + frame))
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("matplotlib")
    from pbt.tools.analyze import analyze

    tmp = tmp_path_factory.mktemp("report")
    out = tmp / "analysis"
    analyze(workspace(tmp / "ws"), out)
    return out


def test_objective_line_has_a_gap_where_the_objective_was_unknown(tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip("matplotlib")
    from pbt.tools import plots
    from pbt.tools.snapshot import read_snapshot

    snapshot = read_snapshot(workspace(tmp_path / "ws"))
    points = plots.objective_points(snapshot.member(0))
    assert [f for f, _ in points] == [100, 200, 300, 400, 500, 600]
    assert [math.isnan(o) for _, o in points] == [False, False, True, True, False, False]
    figures: List[Any] = []
    real_finish = plots._finish
    monkeypatch.setattr(plots, "_finish", lambda fig, *a, **k: (figures.append(fig), real_finish(fig, *a, **k))[1])
    plots.plot_objectives(snapshot, tmp_path / "objective.png")
    line = next(l for l in figures[0].axes[0].lines if l.get_label() == "policy 0")
    ys = list(line.get_ydata())
    assert len(ys) == 6 and math.isnan(ys[2]) and math.isnan(ys[3])  # matplotlib breaks the line at NaN
    full = next(l for l in figures[0].axes[0].lines if l.get_label() == "policy 1")
    assert not any(math.isnan(y) for y in full.get_ydata())


def test_report_html_renders_links_and_code(report: Path) -> None:
    page = (report / "report.html").read_text()
    assert "<a href='best/checkpoint.pth'>best/checkpoint.pth</a>" in page
    assert "<a href='best/schedule.yaml'>best/schedule.yaml</a>" in page
    assert re.search(r"<code>pbt-replay [^<]*schedule.yaml task=&lt;task&gt; \.\.\.</code>", page)
    assert "<li>" in page and "`" not in page and "](" not in page
    markdown = (report / "report.md").read_text()  # the Markdown report keeps its Markdown
    assert "[best/checkpoint.pth](best/checkpoint.pth)" in markdown and "`pbt-replay " in markdown


PROBE = """<script>
window.addEventListener('load', function () {
  var text = document.body.innerText;
  var images = Array.prototype.map.call(document.images, function (i) {
    return [i.getAttribute('src'), i.complete ? i.naturalWidth : -1]; });
  var links = Array.prototype.map.call(document.links, function (a) { return a.getAttribute('href'); });
  var out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({images: images, links: links, raw_link: /\\[[^\\]]*\\]\\([^)]*\\)/.test(text),
                                    backtick: text.indexOf('`') >= 0});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    why = "no chromium: apt-get install chromium (Debian's package; .ci/run installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(why)  # CI must run this test, not skip it
    pytest.skip(why)


def test_report_in_a_headless_browser(report: Path) -> None:
    browser = chromium()
    # the report with a probe appended, beside it so relative image and link paths resolve the same
    page = (report / "report.html").read_text().replace("</body>", PROBE + "</body>")
    probe_page = report / "report_probe.html"
    probe_page.write_text(page)
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--virtual-time-budget=10000", "--dump-dom", probe_page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", proc.stdout, re.S)
    assert found, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert sorted(src for src, _ in result["images"]) == ["hyperparameters.png", "lineage.png", "objective.png"]
    from PIL import Image

    for src, width in result["images"]:  # loaded and decoded: the browser's width is the file's
        with Image.open(report / src) as image:
            assert width == image.size[0] > 0, (src, width)
    assert not result["raw_link"] and not result["backtick"], result
    assert {"best/checkpoint.pth", "best/schedule.yaml"} <= set(result["links"])
    assert all((report / href).is_file() for href in result["links"])
