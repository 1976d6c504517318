"""`hlofuse viz`: the page's data (boundaries with reasons, source lines, C), the self-contained
HTML, the CLI, and (marker `browser`) the page drawn in headless Chromium: nodes and clusters,
no console errors, clicking opens the panel with the ops, a non-trivial screenshot."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

from hlofuse import examples
from hlofuse.passes.pipelines import run_pipeline
from hlofuse.text import parse
from hlofuse.tools import viz as vizmod

CRAFTED = """HloModule crafted

add_f32 {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

body {
  p = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[16] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  e = f32[16] exponential(x), META(exp,21)
  n = f32[16] negate(e), META(neg,22)
  s = f32[16] sine(n), META(sin</script>,23)
  ROOT t = (s32[], f32[16]) tuple(i1, s)
}

cond {
  p = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(4)
  ROOT lt = pred[] compare(i, c), direction=LT
}

ENTRY main {
  a = f32[16,16] parameter(0)
  b = f32[16,16] parameter(1)
  d = f32[16,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, META(matmul,10)
  e = f32[16,16] exponential(d), META(exp,11)
  m = f32[16,16] multiply(e, a), META(mul,12)
  zero = f32[] constant(0)
  r = f32[16] reduce(m, zero), dimensions={1}, to_apply=add_f32, META(sum,13)
  z = s32[] constant(0)
  init = (s32[], f32[16]) tuple(z, r)
  w = (s32[], f32[16]) while(init), condition=cond, body=body
  ROOT out = f32[16] get-tuple-element(w), index=1
}
"""
# META(op_name,line): source locations in model.py (kept short for the line-length limit)
CRAFTED = re.sub(r"META\(([^,]+),(\d+)\)",
                 r'metadata={op_name="\1" source_file="model.py" source_line=\2}', CRAFTED)


def page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="viz-data">(.*?)</script>', page, re.S)
    assert m is not None, "the page embeds its data"
    return json.loads(m.group(1))


def nodes_of(view: dict) -> dict[str, dict]:
    return {n["id"]: n for c in view["comps"].values() for n in c["nodes"]}


@pytest.fixture(scope="module")
def crafted_page() -> str:
    return vizmod.viz(CRAFTED, "xla", title="crafted")


@pytest.fixture(scope="module")
def cartpole_page() -> str:
    name = "cartpole_baseline"
    module = parse(examples.text(name), source_name=str(examples.path(name)))
    return vizmod.viz(module, "xla")


# ----- data ---------------------------------------------------------------------------------

def test_after_view_has_the_fusion_with_its_ops_and_source_lines(crafted_page: str) -> None:
    after = page_data(crafted_page)["views"]["after"]
    fusions = [n for n in nodes_of(after).values() if n["cls"] == "fusion"]
    entry_fusion = next(n for n in fusions if n["kind"] == "kInput")
    ops = {row[1] for row in entry_fusion["ops"]}
    assert {"exponential", "multiply", "reduce"} <= ops
    assert {row[3] for row in entry_fusion["ops"]} >= {"model.py:11", "model.py:12",
                                                        "model.py:13"}
    before = page_data(crafted_page)["views"]["before"]
    assert not any(n["cls"] == "fusion" for n in nodes_of(before).values())
    assert nodes_of(before)["w"]["calls"] == {"body": "body", "condition": "cond"}


def test_boundaries_carry_the_refusing_rule(crafted_page: str) -> None:
    after = page_data(crafted_page)["views"]["after"]
    by_pair = {(b["from"], b["to"]): b for b in after["boundaries"]}
    fusion = next(n["id"] for n in nodes_of(after).values() if n.get("kind") == "kInput")
    dot = by_pair[("d", fusion)]
    assert dot["category"] == "fusion"
    assert dot["path"] == ["d", fusion]
    assert any("not loop-fusible" in r["reason"] for r in dot["reasons"]), dot["reasons"]
    assert dot["source"] == "model.py:10"
    loop = by_pair[(fusion, "w")]
    assert loop["category"] == "control-flow"
    assert loop["path"] == [fusion, "init", "w"]  # highlighted through the while's tuple
    assert "while" in loop["reasons"][0]["reason"]


def test_fallback_boundaries_without_explain() -> None:
    before = parse(CRAFTED)
    after = before.clone()
    run_pipeline(before, "none")
    run_pipeline(after, "xla")
    found = {(b.producer, b.consumer): b for b in vizmod.boundaries(after)}
    fusion = next(i.name for i in after.entry.instructions if i.opcode.value == "fusion")
    assert set(found) == {("d", fusion), (fusion, "w")}
    assert any("not loop-fusible" in r["reason"] for r in found[("d", fusion)].reasons)
    assert "while" in found[(fusion, "w")].reasons[0]["reason"]
    data = page_data(vizmod.render(before, after, title="t"))
    assert {(b["from"], b["to"]) for b in data["views"]["after"]["boundaries"]} == set(found)


def test_page_is_self_contained_and_escapes_script_tags(crafted_page: str) -> None:
    assert "<link" not in crafted_page
    assert not re.search(r"<script[^>]*\ssrc=", crafted_page)
    assert "dagre" in crafted_page and "hlofuseViz" in crafted_page
    # the op_name "sin</script>" must not close the data block early
    assert crafted_page.count("</script>") == 3
    after = page_data(crafted_page)["views"]["after"]
    assert any("sin</script>" in n.get("op_name", "") for n in nodes_of(after).values())


def test_kernel_sources_are_attached_to_their_kernels() -> None:
    before = parse(CRAFTED)
    after = before.clone()
    run_pipeline(after, "xla")
    page = vizmod.render(before, after, title="t", kernel_sources={"d": "void k_d(void) {}"})
    nodes = nodes_of(page_data(page)["views"]["after"])
    assert nodes["d"]["c"] == "void k_d(void) {}"
    assert "c" not in nodes["w"]


def test_cartpole_page_counts_match_the_kernel_report(cartpole_page: str) -> None:
    data = page_data(cartpole_page)
    after, before = data["views"]["after"], data["views"]["before"]
    assert after["kernels"]["loops"]["while.74"] < before["kernels"]["loops"]["while.74"]
    assert len(after["boundaries"]) > 10
    cats = Counter(b["category"] for b in after["boundaries"])
    assert cats["fusion"] > 0 and cats["control-flow"] > 0 and cats["loop-state"] > 0
    assert all(b["reasons"][0]["reason"] for b in after["boundaries"])


def _args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    vizmod.add_arguments(parser)
    argv: list[str] = []
    for k, v in kw.items():
        if k == "file":
            argv.insert(0, str(v))
        elif v is True:
            argv.append("--" + k.replace("_", "-"))
        else:
            argv += ["--" + k.replace("_", "-"), str(v)]
    return parser.parse_args(argv)


def test_cli_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "crafted.hlo"
    src.write_text(CRAFTED)
    out = tmp_path / "out.html"
    assert vizmod.main(_args(file=src, output=out, no_c=True)) == 0
    assert page_data(out.read_text())["title"] == "crafted (hlofuse)"  # what compile runs
    assert vizmod.main(_args(file=tmp_path / "missing.hlo")) == 1
    assert "no such file" in capsys.readouterr().err
    assert vizmod.main(_args()) == 2
    assert vizmod.main(_args(example="no_such_example", output=out)) == 1
    assert "unknown example" in capsys.readouterr().err


# ----- headless Chromium ----------------------------------------------------------------------

NO_BROWSER = "no headless Chromium/chromedriver installed; apt-get install chromium chromium-driver"


def _browser_paths() -> tuple[str, str] | None:
    driver = shutil.which("chromedriver")
    chrome = next((p for p in (shutil.which(n) for n in (
        "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p), None)
    return (driver, chrome) if driver and chrome else None


@pytest.fixture(scope="module")
def browser():
    paths = _browser_paths()
    if paths is None:
        pytest.skip(NO_BROWSER)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium); " + NO_BROWSER)
    options = Options()
    options.binary_location = paths[1]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1600,1000", "--allow-file-access-from-files"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(paths[0]), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _load(driver, page: str, path: Path) -> None:
    path.write_text(page, encoding="utf-8")
    driver.get(path.resolve().as_uri())
    for _ in range(100):
        if driver.execute_script("return document.body.dataset.ready") == "1":
            return
        driver.implicitly_wait(0.1)
    pytest.fail("the page did not finish drawing: " + "; ".join(_console_errors(driver)))


def _count(driver, selector: str) -> int:
    return driver.execute_script(f"return document.querySelectorAll({selector!r}).length")


def _click(driver, selector: str) -> None:
    """Click the first match like a user does (a real mouse event on the element)."""
    from selenium.webdriver.common.by import By

    el = driver.find_element(By.CSS_SELECTOR, selector)
    driver.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", el)


def _check_png(path: Path, min_w: int = 800, min_h: int = 500) -> None:
    """Not all one colour: decode the PNG's pixels (8-bit RGB/RGBA) and count colours."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, ctype = struct.unpack(">IIBB", raw[16:26])
    assert width >= min_w and height >= min_h and depth == 8 and ctype in (2, 6)
    chunks, pos = [], 8
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        if raw[pos + 4:pos + 8] == b"IDAT":
            chunks.append(raw[pos + 8:pos + 8 + n])
        pos += 12 + n
    data = zlib.decompress(b"".join(chunks))
    channels = 3 if ctype == 2 else 4
    stride = 1 + width * channels
    colours: Counter[bytes] = Counter()
    for y in range(0, height, 7):  # sampled rows; filter type 0/1/... bytes give a lower bound
        row = data[y * stride + 1:(y + 1) * stride]
        colours.update(row[i:i + 3] for i in range(0, len(row), channels * 5))
    assert len(colours) > 20, f"screenshot has only {len(colours)} colours"
    assert colours.most_common(1)[0][1] < 0.97 * sum(colours.values()), "screenshot is blank"


@pytest.mark.browser
def test_crafted_page_in_chromium(browser, tmp_path: Path) -> None:
    _load(browser, vizmod.viz(CRAFTED, "xla", title="crafted"), tmp_path / "crafted.html")
    assert _console_errors(browser) == []
    assert _count(browser, "#pane-before g.node") > 0
    assert _count(browser, "#pane-after g.node") > 0
    assert _count(browser, "#pane-after g.cluster") > 0  # the small fusion starts expanded
    assert _count(browser, "#pane-after g.edge.boundary") > 0
    # the while starts collapsed; a click expands body and condition as clusters
    assert _count(browser, '#pane-after g.node[data-name="w"]') == 1
    _click(browser, '#pane-after g.node[data-name="w"]')
    assert _count(browser, '#pane-after g.cluster[data-name="w"]') >= 3
    assert _count(browser, '#pane-before g.cluster[data-name="w"]') >= 3  # linked panes
    # collapse everything, then click the fusion: the panel lists its ops
    _click(browser, "#collapse-all")
    fusion = browser.execute_script(
        "return document.querySelector('#pane-after g.node.fusion-kInput').dataset.name")
    _click(browser, f'#pane-after g.node[data-name="{fusion}"]')
    panel = browser.execute_script("return document.getElementById('panel').innerText")
    assert not browser.execute_script("return document.getElementById('panel').hidden")
    assert "Ops (" in panel and "reduce" in panel and "multiply" in panel
    assert "model.py:13" in panel
    assert "not loop-fusible" in panel  # its boundary with the dot, with the rule
    _click(browser, "#pane-after g.edge.boundary")
    panel = browser.execute_script("return document.getElementById('panel').innerText")
    assert "→" in panel
    assert _console_errors(browser) == []


@pytest.mark.browser
def test_cartpole_page_in_chromium(browser, cartpole_page: str, tmp_path: Path) -> None:
    _load(browser, cartpole_page, tmp_path / "cartpole.html")
    assert _console_errors(browser) == []
    _click(browser, '#pane-after g.node[data-name="while.74"]')
    assert _count(browser, "#pane-after g.cluster") > 5
    assert _count(browser, "#pane-after g.node") > 50
    assert _count(browser, "#pane-before g.node") > 100
    assert _count(browser, "#pane-after g.edge.boundary") > 10
    browser.execute_script("hlofuseViz.select('after', 'fusion.32')")
    panel = browser.execute_script("return document.getElementById('panel').innerText")
    assert "Ops (" in panel and "cartpole.py:" in panel
    assert _console_errors(browser) == []
    shot = tmp_path / "cartpole.png"
    browser.save_screenshot(str(shot))
    _check_png(shot)
