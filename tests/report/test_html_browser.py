"""The comparison page in a real browser (issue 33, item 5): Debian's headless ``chromium``
renders the demo report (:mod:`tests.report.demo_report`: a failed run, a run with seed
replicas, real plots) at 1366x768. Checked by DOM: the summary cards, the inline images (data
URIs that decode to PNG, and that the browser decoded), one results table per eval set, sorting
by a click, and that nothing is wider than the window; a screenshot is saved in the test's tmp
dir. Skips where chromium is not installed (``.ci/run`` installs it as root)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.report.demo_report import build_demo

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install chromium; .ci/run does it as root)",
)

WIDTH, HEIGHT = 1366, 768
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PROBE = """
<script>
window.addEventListener("load", function () {
  var root = document.documentElement;
  var r = {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
           innerWidth: window.innerWidth, overflowing: [], images: [], sorted: {}};
  document.querySelectorAll(".card, table, th, td, figure, details, p").forEach(function (el) {
    var box = el.getBoundingClientRect();
    var inside = el.scrollWidth <= el.clientWidth + 1 || el.tagName === "TABLE";
    if (box.right > root.clientWidth + 1 || !inside) {
      r.overflowing.push(el.tagName + "." + el.className + "#" + el.id);
    }
  });
  document.querySelectorAll("img").forEach(function (img) {
    r.images.push({complete: img.complete, width: img.naturalWidth, shown: img.clientWidth});
  });
  var table = document.querySelector("table[data-table=eval-set]");
  var head = Array.prototype.find.call(table.tHead.rows[0].cells, function (th) {
    return th.textContent.trim() === "WER %";
  });
  function column() {
    return Array.prototype.map.call(table.tBodies[0].rows, function (row) {
      return Number(row.cells[head.cellIndex].getAttribute("data-sort"));
    });
  }
  head.click();
  r.sorted.ascending = column();
  r.sorted.first = head.getAttribute("aria-sort");
  head.click();
  r.sorted.descending = column();
  r.sorted.second = head.getAttribute("aria-sort");
  var out = document.createElement("pre");
  out.id = "probe";
  out.style.display = "none";
  out.textContent = JSON.stringify(r);
  document.body.appendChild(out);
});
</script>
"""
"""Measures the rendered page and clicks a header; what it finds is written into the DOM."""


class Elements(HTMLParser):
    """Every start tag of a page, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def find(self, tag: str, css: str | None = None) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.tags
            if t == tag and (css is None or css in a.get("class", "").split())
        ]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless chromium at the laptop's window size (its own profile under ``tmp_path``)."""
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=10000",
        *args,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo(tmp_path_factory.mktemp("demo"))


def probe_page(page_file: Path, tmp: Path) -> tuple[Elements, dict]:
    """``page_file`` as chromium leaves it after load with :data:`PROBE` added, parsed, and
    what the probe found (sizes, overflowing elements, images, the sort clicks)."""
    probed = tmp / "comparison.probed.html"
    probed.write_text(page_file.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp, "--dump-dom", probed.as_uri()).stdout
    found = re.search(r'<pre id="probe"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run: " + dom[-2000:]
    page = Elements()
    page.feed(dom)
    return page, json.loads(unescape(found.group(1)))


@pytest.fixture(scope="module")
def rendered(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Elements, dict]:
    """The demo page as chromium leaves it after load (the probe run), parsed, and the probe."""
    return probe_page(demo, tmp_path_factory.mktemp("dom"))


def test_the_demo_report_has_a_card_per_run(rendered: tuple[Elements, dict]) -> None:
    page, _ = rendered
    cards = {a["data-run"]: a["class"].split() for a in page.find("article", "card")}
    assert list(cards) == ["base", "bpe", "cand", "broken"]  # baseline first, failed last
    assert "baseline" in cards["base"] and "failed" in cards["broken"]
    seeds = [a["data-run"] for a in page.find("tr", "seed")]
    assert seeds == ["cand-seed0", "cand-seed1", "cand-seed2"]
    decisions = [a["data-decision"] for a in page.find("div", "gate")]
    assert decisions == ["average not kept", "average kept"]  # base, bpe


def test_the_figures_are_inline_pngs_the_browser_shows(rendered: tuple[Elements, dict]) -> None:
    page, probe = rendered
    kinds = [a["data-kind"] for a in page.find("figure")]
    assert kinds.count("differences") == 1
    assert kinds.count("learning_curves") == 4  # base, bpe, cand-seed0, cand-seed1
    assert kinds.count("slices") == 8  # the same on demo.dev and demo.test
    sources = [a["src"] for a in page.find("img")]
    assert len(sources) == len(kinds)
    for src in sources:
        prefix, _, data = src.partition(",")
        assert prefix == "data:image/png;base64"
        assert base64.b64decode(data, validate=True).startswith(PNG_MAGIC)
    assert len(probe["images"]) == len(sources)
    assert all(i["complete"] and i["width"] > 0 and i["shown"] > 0 for i in probe["images"])


def test_results_are_grouped_by_eval_set_and_sortable(rendered: tuple[Elements, dict]) -> None:
    page, probe = rendered
    sets = [a["id"] for a in page.find("h3") if a.get("id", "").startswith("set-")]
    assert sets == ["set-demo.dev", "set-demo.test"]  # the dev set first
    tables = [a.get("data-table") for a in page.find("table", "results")]
    assert tables == ["eval-set", "eval-set", "replicas", "archived"]
    by_set = [a["data-eval-set"] for a in page.find("table", "results") if "data-eval-set" in a]
    assert by_set == ["demo.dev", "demo.test"]
    ascending, descending = probe["sorted"]["ascending"], probe["sorted"]["descending"]
    assert len(ascending) == 12 and ascending == sorted(ascending)
    assert descending == sorted(ascending, reverse=True)
    assert (probe["sorted"]["first"], probe["sorted"]["second"]) == ("ascending", "descending")


def test_nothing_is_wider_than_a_laptop_screen(rendered: tuple[Elements, dict]) -> None:
    _, probe = rendered
    assert probe["innerWidth"] == WIDTH
    assert probe["scrollWidth"] <= probe["clientWidth"], probe
    assert probe["overflowing"] == []


def test_a_screenshot_at_1366x768(demo: Path, tmp_path: Path) -> None:
    shot = tmp_path / "comparison-1366x768.png"
    chromium(tmp_path, f"--screenshot={shot}", demo.as_uri())
    png = shot.read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert struct.unpack(">II", png[16:24]) == (WIDTH, HEIGHT)
    print(f"screenshot: {shot}")


def test_long_eval_set_names_wrap_inside_their_cards(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real corpus's eval sets (``fsdd_nicolas_devtakes.dev``) have no break opportunity: the
    cards' tables must still fit their columns and the page the window."""
    from tests.report import demo_report

    monkeypatch.setattr(demo_report, "DEV", "fsdd_nicolas_devtakes_long_name.dev")
    monkeypatch.setattr(demo_report, "TEST", "fsdd_nicolas_devtakes_long_name.test")
    page = demo_report.build_demo(tmp_path_factory.mktemp("long"))
    _, probe = probe_page(page, tmp_path_factory.mktemp("long-dom"))
    assert probe["scrollWidth"] <= probe["clientWidth"], probe
    assert probe["overflowing"] == []
