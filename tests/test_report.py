"""The HTML report: rendered from real GPU runs (tests/fixtures/runs/), opened in real headless
Chromium (tests/chromium.py): no console message, no network request, the charts drawn without an
error, the headline numbers in the DOM, a screenshot in tests/_artifacts/. Also: untrusted names
stay text, old/partial run.json render, `advisor report` and `advisor compare`, traces are Chrome
trace JSON (what Perfetto opens), and the pure parts (timeline, safe JSON, patch hunks).
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import chromium
import numpy as np
import pytest

from advisor import rundir
from advisor.report import html as report_html, timeline, view

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "tests" / "fixtures" / "runs"  # recorded GPU runs (tests/fixtures/runs/README.md)
LADDER_H200 = RUNS / "cifar_ladder_h200"
SLOW, TUNED = RUNS / "cifar_slow_h200", RUNS / "cifar_tuned_h200"
ARTIFACTS = REPO / "tests" / "_artifacts"
FIXTURE_TRACE = REPO / "tests" / "fixtures" / "traces" / "amp_bf16_channels_last.pt.trace.json.gz"
EVIL = "</script><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned2'\">"

needs_chromium = pytest.mark.skipif(chromium.chromium() is None, reason="no chromium (apt-get install chromium)")

DATALOADER_DIFF = """\
--- a/cifar_resnet.py
+++ b/cifar_resnet.py
@@ -115,7 +115,8 @@
     images, labels = make_synthetic_cifar(args.num_samples, args.image_size, args.seed)
     dataset = SyntheticCIFAR(images, labels)
     loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
-                                         num_workers=0, pin_memory=False, drop_last=True)
+                                         num_workers=4, pin_memory=True, drop_last=True,
+                                         persistent_workers=True, prefetch_factor=4)
 
     model = build_model().to(device)
     criterion = nn.CrossEntropyLoss()
@@ -136,8 +137,8 @@
     for epoch in range(epochs):
         running_loss = 0.0
         for i, (inputs, targets) in enumerate(loader):
-            inputs = inputs.to(device)
-            targets = targets.to(device)
+            inputs = inputs.to(device, non_blocking=True)
+            targets = targets.to(device, non_blocking=True)
             optimizer.zero_grad(set_to_none=False)
             outputs = model(inputs)
             loss = criterion(outputs, targets)
"""


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    shutil.copy(src / "run.json", dst / "run.json")
    if (src / "tb").is_dir():  # runs committed as evidence keep no traces
        shutil.copytree(src / "tb", dst / "tb")
    return dst


def advisor(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=300)


def assert_clean(page: chromium.Page):
    assert page.body_attrs.get("data-ready") == "1", page.stderr[-2000:]
    assert page.body_attrs.get("data-errors") == "", page.body_attrs.get("data-errors")
    assert page.console == [], page.console
    assert page.requests == [], page.requests


def assert_offline_source(text: str):
    """Nothing in the markup can make a request: no remote src/href/url(), one CSP, 3 scripts."""
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", text, re.I)
    assert not re.search(r"<link\b", text, re.I)
    assert text.count("<script") == 3  # chart data (JSON), Chart.js, the page script
    assert "default-src 'none'" in text and "'unsafe-inline'" not in text.split("script-src", 1)[1].split('"')[0]
    assert text.count("Chart.js v4.6.1") == 1 and "Released under the MIT License" in text


@pytest.fixture(scope="module")
def ladder_h200(tmp_path_factory):
    run = copy_run(LADDER_H200, tmp_path_factory.mktemp("ladder") / "cifar_ladder_h200")
    r = advisor("report", run)
    assert r.returncode == 0, r.stderr
    return run


@pytest.fixture(scope="module")
def accepted_run(tmp_path_factory):
    """ladder_h200 as if 02-dataloader-workers-4 had cleared a 20% threshold (and fixes.patch was
    written); its trace is the tuned example's, so the 'after' timeline has a real trace."""
    run = copy_run(LADDER_H200, tmp_path_factory.mktemp("acc") / "accepted")
    doc = rundir.read_json(run / "run.json")
    doc["trial_summary"].update(noise=0.1, threshold=0.2)
    for t in doc["trials"]:
        if t["name"] == "02-dataloader-workers-4":
            t["status"], t["reason"] = "accepted", "+57.2% vs the previous stack (threshold 20.0%)"
            (run / t["traces"][0]).parent.mkdir(parents=True)
            shutil.copy(next((TUNED / "tb" / "baseline").iterdir()), run / t["traces"][0])
    doc["patch"] = {"file": "fixes.patch", "notes": [
        {"intervention": "dataloader-workers", "applied": True, "where": "cifar_resnet.py:117",
         "edits": ["num_workers=4", "non_blocking=True at cifar_resnet.py:139"]}]}
    (run / "fixes.patch").write_text(DATALOADER_DIFF)
    rundir.write_json(run / "run.json", doc)
    assert advisor("report", run).returncode == 0
    return run


# --- in the browser --------------------------------------------------------------------------

@needs_chromium
def test_real_gpu_run_in_chromium(ladder_h200):
    text = (ladder_h200 / "index.html").read_text()
    assert len(text.encode()) < 400_000
    assert_offline_source(text)
    page = chromium.open_page(ladder_h200 / "index.html", screenshot=ARTIFACTS / "report-ladder_h200.png")
    assert_clean(page)
    dom = page.dom
    for needle in ("12,420", "20.61 ms", "0.34 GiB", "1.00×", "35.6%", "71.2%", "No fix was proven",
                   "NVIDIA H200", "580.159.04", "9.19.0", "tensorboard --logdir", "ProfilerStep#2"):
        assert needle in dom, needle
    doc = rundir.read_json(ladder_h200 / "run.json")
    for t in doc["trials"]:  # every trial with its verdict and reason
        assert t["name"] in dom and t["reason"].replace("<", "&lt;") in dom
    for f in doc["findings"]:
        assert f'id="finding-{f["code"]}"' in dom
    canvases = re.findall(r'<canvas id="([\w-]+)"[^>]*(?:height|style)=', dom)
    assert {"chart-gains", "chart-breakdown", "chart-timeline-0", "chart-kernels"} <= set(canvases), canvases
    png = (ARTIFACTS / "report-ladder_h200.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


@needs_chromium
def test_before_after_run_in_chromium(accepted_run):
    page = chromium.open_page(accepted_run / "index.html", screenshot=ARTIFACTS / "report-accepted.png")
    assert_clean(page)
    for needle in ("1.57×", "12,420", "19,527", "20.61 ms", "13.11 ms", "after: dataloader-workers",
                   "fixes.patch", "num_workers=4, pin_memory=True", 'id="chart-timeline-1"'):
        assert needle in page.dom, needle
    finding = page.dom.split('id="finding-ADV103"', 1)[1].split('class="finding"', 1)[0]
    assert "the change (from fixes.patch)" in finding and "non_blocking=True" in finding


@needs_chromium
def test_compare_in_chromium(tmp_path):
    out = tmp_path / "compare.html"
    r = advisor("compare", SLOW, TUNED, "--out", out)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert_offline_source(text)
    page = chromium.open_page(out, screenshot=ARTIFACTS / "compare.png")
    assert_clean(page)
    for needle in ("1.73×", "16,590", "28,725", "15.43 ms", "8.91 ms", "resolved", "remaining",
                   "tensorboard --logdir_spec", 'id="chart-timeline-1"', "num_workers"):
        assert needle in page.dom, needle


def hostile_run(tmp: Path) -> Path:
    """A run whose trace, script path, notes and config hold markup and script."""
    from advisor import results
    from advisor.metrics import analyze
    from advisor.trace import load_trace

    run = tmp / "hostile"
    (run / "tb" / "baseline").mkdir(parents=True)
    raw = json.loads(gzip.open(FIXTURE_TRACE).read())
    for ev in raw["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev["name"] = EVIL + ev["name"]
    trace = run / "tb" / "baseline" / "host_1.1.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(raw).encode()))
    model = load_trace(trace)
    analysis = analyze(model)
    config = {"optimizer": {"value": {"class": EVIL}, "where": EVIL + ".py:1"}}
    env = {"gpu_name": EVIL, "torch": "2.x"}
    findings, skipped = results.run_findings(model, analysis, config, env, [])
    spec = {"script": f"/x/{EVIL}.py", "argv": [f"{EVIL}.py", EVIL], "cwd": "/x", "run_dir": str(run),
            "run_name": "baseline", "warmup_steps": 1, "profile_steps": 3, "measure_steps": 5,
            "record_memory": False, "with_stack": False}
    child = {"status": "complete", "trace_files": [str(trace.relative_to(run))], "config": config,
             "environment": env, "notes": [EVIL], "step_times_ms": [10.0, 11.0, 12.0], "batch_size": 8}
    doc = results.build_run_document(spec, child, analysis, findings, skipped, [])
    doc["trials"] = [{"name": "01-" + EVIL, "fix": EVIL, "status": "rejected", "reason": EVIL,
                      "interventions": [EVIL], "traces": [EVIL], "breakdown": analysis["breakdown"]}]
    rundir.write_json(run / "run.json", doc)
    report_html.write_html(doc, run / "index.html")
    return run


@needs_chromium
def test_untrusted_names_stay_text(tmp_path):
    run = hostile_run(tmp_path)
    text = (run / "index.html").read_text()
    assert_offline_source(text)  # still exactly 3 scripts: nothing broke out of the JSON block
    assert "<img" not in text and "</script><script>document" not in text
    page = chromium.open_page(run / "index.html")
    assert_clean(page)
    assert "<img" not in page.dom  # no element was injected, and no script changed the title
    assert page.dom.split("<title>", 1)[1].startswith("advisor report — &lt;/script&gt;")
    shown = "&lt;/script&gt;&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;img"
    assert shown in page.dom  # kernel names etc. are there, as text
    top = page.dom.split('id="top-kernels"', 1)[1].split("</table>", 1)[0]
    assert shown in top


@needs_chromium
def test_csp_blocks_any_other_script(ladder_h200, tmp_path):
    """Defence in depth: the policy allows only the two inlined scripts (by hash), so markup that
    slipped past escaping still could not run a script."""
    text = (ladder_h200 / "index.html").read_text()
    p = tmp_path / "injected.html"
    p.write_text(text.replace("<h1>", "<script>document.title='ran'</script><h1>", 1))
    page = chromium.open_page(p)
    assert page.body_attrs.get("data-ready") == "1"  # the report's own scripts still ran
    assert any("Content Security Policy" in c for c in page.console), page.console
    assert "<title>ran</title>" not in page.dom


@needs_chromium
def test_harness_sees_errors_and_requests(tmp_path):
    """The checks above would catch a broken or leaky page (no CSP here, on purpose)."""
    p = tmp_path / "leaky.html"
    p.write_text('<html><body><img src="http://example.invalid/x.png"><script>console.error("boom");'
                 'fetch("https://example.invalid/a").catch(function(){}); nosuchfn();</script></body></html>')
    page = chromium.open_page(p)
    assert any("boom" in c for c in page.console) and any("Uncaught" in c for c in page.console)
    assert {"http://example.invalid/x.png", "https://example.invalid/a"} <= set(page.requests)


# --- without a browser -------------------------------------------------------------------------

def test_old_and_partial_run_documents_render(tmp_path):
    doc = rundir.read_json(LADDER_H200 / "run.json")
    partial = [{}, {"status": "incomplete", "incomplete_reasons": ["killed"]},
               {k: v for k, v in doc.items() if k not in ("analysis", "trials", "trial_summary", "memory")},
               {**doc, "analysis": None, "findings": None, "trials": [{"name": "x"}, "junk"],
                "measurement": {"step_time_ms": float("nan")}, "environment": {"cudnn": "n/a"}}]
    for d in partial:
        text = report_html.render_html(d, tmp_path)
        assert "advisor report" in text and "&lt;" not in text[:200]
        assert "advisor report" in report_html.render_compare(d, doc, tmp_path, LADDER_H200)
    old = tmp_path / "old"
    old.mkdir()
    rundir.write_json(old / "run.json", {k: v for k, v in doc.items() if k in ("command", "measurement", "status")})
    r = advisor("report", old)
    assert r.returncode == 0, r.stderr
    assert "20.61 ms" in (old / "index.html").read_text()


def test_compare_cli_errors(tmp_path):
    r = advisor("compare", SLOW, tmp_path / "nope", "--out", tmp_path / "c.html")
    assert r.returncode == 1 and "no run.json" in r.stderr
    r = advisor("compare", SLOW, TUNED)  # no --out: the comparison on the terminal, no page
    assert r.returncode == 0 and "samples/s" in r.stdout and not list(tmp_path.iterdir())


def test_safe_json_cannot_close_the_script_block():
    data = {"k": EVIL, "u": "a\u2028b&c", "n": float("nan"), "a": np.float32(1.5)}
    text = report_html.safe_json(data)
    assert not set("<>&") & set(text) and "\u2028" not in text
    back = json.loads(text)
    assert back["k"] == EVIL and back["u"] == "a\u2028b&c" and back["n"] is None and back["a"] == 1.5


def test_timeline_of_the_median_step():
    from advisor.trace import load_trace
    model = load_trace(LADDER_H200)
    tl = timeline.step_timeline(model)
    durs = sorted(d for _, d, _ in model.steps)
    assert tl["step_ms"] == pytest.approx(durs[len(durs) // 2] / 1000, abs=1e-3)
    kinds = [lane["kind"] for lane in tl["lanes"]]
    assert kinds[0] == "cpu" and "gpu" in kinds and kinds[-1] == "idle"
    cpu = tl["lanes"][0]["segs"]
    assert {tl["phases"][s[2]] for s in cpu} >= {"data_wait", "forward", "backward", "optimizer"}
    for lane in tl["lanes"]:
        segs = lane["segs"]
        assert all(0 <= s[0] <= s[1] <= tl["step_ms"] + 1e-6 for s in segs)
        assert all(a[0] <= b[0] for a, b in zip(segs, segs[1:]))
    assert tl["gpu_busy_ms"] + tl["gpu_idle_ms"] == pytest.approx(tl["step_ms"], abs=1e-3)
    assert tl["gaps"][0][1] - tl["gaps"][0][0] > 10  # the data-loader wait: no GPU work for >10 ms
    small = timeline.step_timeline(model, max_segs=20)
    assert all(len(lane["segs"]) <= 20 for lane in small["lanes"])
    assert len(json.dumps(tl)) < 40_000


def test_the_timeline_of_a_gpu_bound_step_follows_its_gpu_work():
    """H200, 8-worker ImageFolder trial: the host ran ahead of the GPU in its profiled steps.
    The step drawn is the metrics' median step, which lasts until its GPU work is done: the
    GPU is busy through it, as it was (98.9% in the metrics)."""
    from advisor.metrics import analyze
    from advisor.trace import load_trace
    run = REPO / "tests" / "fixtures" / "runs" / "imagefolder_dali_h200" / "tb" / "01-dataloader-workers-8"
    model = load_trace(str(next(run.glob("*.pt.trace.json.gz"))))
    tl = timeline.step_timeline(model)
    assert tl["step_ms"] == pytest.approx(analyze(model)["step_time_ms"], abs=1e-3)
    assert tl["gpu_busy_ms"] > 0.9 * tl["step_ms"]


def test_merge_segments():
    s, e = np.array([0.0, 1.0, 1.5, 5.0]), np.array([1.0, 1.4, 2.0, 6.0])
    key, ids = np.array([1, 1, 2, 2]), np.array([7, 8, 9, 10])
    assert timeline.merge_segments(s, e, key, ids, gap=0.2) == [(0.0, 1.4, 1, 7), (1.5, 2.0, 2, 9), (5.0, 6.0, 2, 10)]
    assert timeline.merge_segments(s, e, np.zeros(4, int), ids, gap=5)[0] == (0.0, 6.0, 0, 7)


def test_patch_hunks_per_fix():
    hunks = view.split_hunks(DATALOADER_DIFF)
    assert [(h["file"], h["start"], h["end"]) for h in hunks] == [("cifar_resnet.py", 115, 121), ("cifar_resnet.py", 136, 143)]
    both = view.hunks_for_note(hunks, {"where": "cifar_resnet.py:117", "edits": ["non_blocking=True at cifar_resnet.py:139"]})
    assert both.count("@@") == 4 and both.startswith("--- a/cifar_resnet.py")
    assert view.hunks_for_note(hunks, {"where": "other.py:117"}) == ""


def test_headline_and_ladder():
    doc = rundir.read_json(LADDER_H200 / "run.json")
    rows = view.ladder(doc)
    head = view.headline(doc, rows)
    assert head["best"] is None and head["speedup"] == pytest.approx(1.0)
    assert [r["name"] for r in head["promising"]] == ["02-dataloader-workers-4", "06-fused-optimizer",
                                                      "03-dataloader-workers-8"]
    doc2 = copy.deepcopy(doc)
    doc2["trials"][2]["status"] = "accepted"
    head2 = view.headline(doc2, view.ladder(doc2))
    assert head2["best"]["name"] == "02-dataloader-workers-4"
    assert head2["speedup"] == pytest.approx(19527.30 / 12419.53, rel=1e-4)
    assert view.cudnn_text(91900) == "9.19.0" and view.cudnn_text(8902) == "8.9.2"


def test_example_traces_are_chrome_trace_json():
    """What Perfetto's and chrome://tracing's JSON importers need: an object with a traceEvents
    list; every event a dict with a phase; complete events with numeric ts/dur and pid/tid;
    strict JSON (no NaN)."""
    files = sorted(RUNS.glob("*/tb/*/*.pt.trace.json.gz"))
    assert len(files) >= 5
    for f in files[:3]:
        doc = json.loads(gzip.open(f).read(), parse_constant=lambda c, f=f: pytest.fail(f"{f}: {c}"))
        events = doc["traceEvents"]
        assert isinstance(events, list) and len(events) > 1000
        for ev in events:
            assert isinstance(ev, dict) and isinstance(ev.get("ph"), str), ev
            if ev["ph"] == "X":
                assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
                assert "pid" in ev and "tid" in ev and isinstance(ev.get("name"), str)


def test_ladder_shows_the_warmup_cost_apart_from_the_step_time(tmp_path):
    doc = rundir.read_json(LADDER_H200 / "run.json")
    for t in doc["trials"]:
        if t["name"] == "02-dataloader-workers-4":
            t["warmup_cost_s"] = 41.25
    text = report_html.render_html(doc, tmp_path)
    ladder = text.split('id="ladder"', 1)[1].split("</table>", 1)[0]
    assert ">warm-up</th>" in ladder
    row = ladder.split("(02-dataloader-workers-4)", 1)[1].split("</tr>", 1)[0]
    assert '<td class="num warmup">41.2 s</td>' in row
    assert ladder.count('<td class="num warmup">–</td>') >= 2  # the baseline, and trials of older documents


def test_ladder_says_why_a_rung_holds_several_fixes(tmp_path):
    """A rung of several fixes (riders on compile, a pair, a bundle) shows why, escaped."""
    doc = rundir.read_json(RUNS / "ladder_rung_notes_h100" / "run.json")
    row = next(t for t in doc["trials"] if t["name"] == "07-torch-compile-reduce-overhead+amp")
    row["rung_note"] = "amp(dtype=bfloat16): rejected while the GPU idled <80%>; trialled with torch-compile"
    text = report_html.render_html(doc, tmp_path)
    ladder = text.split('id="ladder"', 1)[1].split("</table>", 1)[0]
    shown = ladder.split("(07-torch-compile-reduce-overhead+amp)", 1)[1].split("</tr>", 1)[0]
    assert "rejected while the GPU idled &lt;80%&gt;; trialled with torch-compile" in shown
    assert ladder.count('class="small muted rung-note"') == 1


def test_patch_notes_show_why_an_edit_was_added_and_what_to_check(tmp_path):
    """An edit another one needs (set_to_none=True with CUDA graphs) says so, and a note's
    warning (values kept on the device by defer-syncs) is shown, escaped."""
    doc = rundir.read_json(RUNS / "cifar_ladder_patch_notes_h100" / "run.json")
    doc["patch"]["notes"].append({"intervention": "set-to-none", "applied": True, "where": "cifar_resnet.py:141",
                                  "edits": ["set_to_none=True"], "required_by": "torch-compile",
                                  "why": "CUDA graphs need <gradients> set to None"})
    text = report_html.render_html(doc, tmp_path)
    notes = text.split('id="patch"', 1)[1]
    assert "needed by <code>torch-compile</code>: CUDA graphs need &lt;gradients&gt; set to None" in notes
    assert "check: the values stay 0-dim tensors on the device" in notes


def test_a_step_of_several_micro_batches_shows_them(tmp_path):
    """The H100 nanoGPT-style run: 4 micro-batches of 32 a step, shown as 32x4 in the header,
    the throughput card and the ladder, and in the terminal's trials table."""
    doc = rundir.read_json(RUNS / "gpt_lm_micro_batches_h100" / "run.json")
    assert doc["measurement"]["micro_batches"] == 4 and doc["measurement"]["batch_size"] == 32
    text = report_html.render_html(doc, tmp_path)
    assert "batch 32x4 ·" in text
    ladder = text.split('id="ladder"', 1)[1].split("</table>", 1)[0]
    assert ladder.count('<td class="num">32x4</td>') >= 3  # the baseline, its repeat, the kept trials
    from io import StringIO

    from rich.console import Console

    from advisor.report.terminal import trials_table
    out = StringIO()
    Console(file=out, width=200).print(trials_table(doc))
    assert "32x4" in out.getvalue()


def test_the_terminal_ladder_keeps_its_figures_on_one_line_in_80_columns():
    """In a log's 80 columns each trial's figures and verdict stay on one line (the reasons
    follow the table, a line each): a reason inside the table wrapped a word a line."""
    from io import StringIO

    from rich.console import Console

    from advisor.report.terminal import print_summary
    doc = rundir.read_json(RUNS / "ladder_terminal_h100" / "run.json")
    out = StringIO()
    print_summary(doc, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    for t in doc["trials"]:
        figures = f"{t['speedup_vs_baseline']:.2f}x"
        assert any(line.startswith(figures) and t["status"] in line for line in lines), (t["name"], figures)
        assert any(line.startswith(f"{t['name']}: {t['status']}, ") for line in lines), t["name"]


# --- the profiler's overhead: phases scaled to the measured step -----------------------------

CPU_BREAKDOWN = {"data_wait": 64.7, "forward": 194.1, "backward": 323.5, "optimizer": 51.76, "other": 12.94}


def cpu_doc(measured=70.0, profiled=647.0) -> dict:
    """A CPU run as a user saw it: a 647 ms profiled step against 70 ms measured unprofiled."""
    k = profiled / 647.0
    analysis = {"step_time_ms": profiled, "breakdown": {p: v * k for p, v in CPU_BREAKDOWN.items()}, "steps_in_trace": 2}
    doc = {"status": "complete", "run_dir": "/runs/cpu", "command": {"argv": ["train.py"]},
           "analysis": analysis, "environment": {"torch": "2.x"}}
    if measured is not None:
        doc["measurement"] = {"step_time_ms": measured, "steps_measured": 20, "samples_per_s": 914.3, "batch_size": 64}
    return doc


def test_overhead_scales_the_breakdown_to_the_measured_step():
    from advisor.report.overhead import of_doc, of_trial, profiler_overhead
    ov = of_doc(cpu_doc())
    assert ov["profiled_ms"] == 647.0 and ov["measured_ms"] == 70.0 and ov["kind"] == "slower" and ov["scaled"]
    assert ov["factor"] == pytest.approx(647 / 70)
    assert sum(ov["breakdown"].values()) == pytest.approx(70.0)
    assert ov["breakdown"]["backward"] == pytest.approx(323.5 * 70 / 647)
    assert ov["profiled_breakdown"] == CPU_BREAKDOWN and ov["step_ms"] == 70.0
    assert ov["sentence"] == ("profiled step 647 ms, measured 70.0 ms unprofiled: the profiler made steps 9.2x "
                              "slower; ms are scaled to the measured step, shares are the profiled step's.")
    # `advisor inspect`: a trace alone, nothing measured: unscaled, nothing said of overhead
    for d in (cpu_doc(measured=None), {**cpu_doc(), "measurement": {"step_time_ms": float("nan")}}):
        ov = of_doc(d)
        assert ov["kind"] == "unmeasured" and not ov["scaled"] and ov["factor"] is None and ov["sentence"] is None
        assert ov["breakdown"] == CPU_BREAKDOWN and ov["step_ms"] == 647.0
    assert of_doc({})["breakdown"] is None and of_doc(None)["sentence"] is None
    small = of_doc(cpu_doc(measured=70.0, profiled=74.0))
    assert small["kind"] == "small" and "the two agree within 10% (1.06x), so the profiler added little" in small["sentence"]
    assert "slower" not in small["sentence"]
    fast = of_doc(cpu_doc(measured=70.0, profiled=35.0))
    assert fast["kind"] == "faster" and sum(fast["breakdown"].values()) == pytest.approx(70.0)
    assert "the profiled steps ran 2.0x faster than the timed ones" in fast["sentence"]
    assert "not profiler overhead" in fast["sentence"] and "made steps" not in fast["sentence"]
    t = of_trial({"breakdown": {"forward": 30.0, "gpu_idle": 10.0}, "profiled_step_time_ms": 40.0, "step_time_ms": 20.0})
    assert t["breakdown"] == {"forward": 15.0, "gpu_idle": 5.0} and t["factor"] == 2.0
    assert of_trial({"breakdown": {"forward": 3.0}, "step_time_ms": None})["breakdown"] == {"forward": 3.0}
    assert profiler_overhead({"breakdown": {"a": 1.0, "b": 3.0}}, {"step_time_ms": 2.0})["breakdown"] == {"a": 0.5, "b": 1.5}


def test_terminal_breakdown_is_scaled_to_the_measured_step_and_says_the_overhead():
    from io import StringIO

    from rich.console import Console

    from advisor.report.terminal import print_inspect, print_summary
    out = StringIO()
    print_summary(cpu_doc(), Console(file=out, width=80))
    text = out.getvalue()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "where a measured step's time goes" in text and "profiled ms" in text
    row = next(line for line in lines if "backward" in line)
    assert f"{323.5 * 70 / 647:.2f}" in row and "50.0%" in row and "323.50" in row
    step = next(line for line in lines if "step " in line and "100%" in line)
    assert "70.00" in step and "647.00" in step
    said = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("profiled step"))):][:2])
    assert said == ("profiled step 647 ms, measured 70.0 ms unprofiled: the profiler made steps 9.2x slower; "
                    "ms are scaled to the measured step, shares are the profiled step's.")
    # inspect (a trace alone): the profiled step as before, no overhead sentence
    out = StringIO()
    print_inspect({"trace": "t.pt.trace.json.gz", "analysis": cpu_doc()["analysis"], "findings": []},
                  Console(file=out, width=80))
    text = out.getvalue()
    assert "where a profiled step's time goes" in text and "profiled ms" not in text
    assert "323.50" in text and "647.00" in text and "unprofiled" not in text and "slower" not in text
    # analyze without a measured step (an incomplete run): the same
    out = StringIO()
    print_summary(cpu_doc(measured=None), Console(file=out, width=80))
    assert "where a profiled step's time goes" in out.getvalue() and "unprofiled:" not in out.getvalue()


def test_html_breakdown_is_scaled_to_the_measured_step_and_says_the_overhead(tmp_path):
    doc = cpu_doc()
    doc["analysis"]["breakdown"]["data_wait<b>"] = 0.0  # a phase name is data: escaped
    doc["measurement"]["step_time_ms"] = 70.0
    doc["trials"] = [{"name": "01-amp", "status": "rejected", "reason": "slower", "interventions": ["amp"],
                      "step_time_ms": 50.0, "profiled_step_time_ms": 400.0,
                      "breakdown": {"forward": 300.0, "backward": 100.0}},
                     {"name": "00-baseline-repeat", "status": "reference", "reason": "noise", "step_time_ms": 71.0}]
    text = report_html.render_html(doc, tmp_path)
    table = text.split('id="breakdown"', 1)[1].split("</table>", 1)[0]
    assert '<th class="num">ms / step (scaled to measured)</th><th class="num">ms / profiled step</th>' in table
    row = table.split("<td>backward</td>", 1)[1].split("</tr>", 1)[0]
    assert row == f'<td class="num">{323.5 * 70 / 647:.2f}</td><td class="num">323.50</td><td class="num">50.0%</td>'
    assert "<b>70.00</b>" in table and "<b>647.00</b>" in table
    assert "data_wait&lt;b&gt;" in table and "data_wait<b>" not in text
    said = text.split('id="profiler-overhead">', 1)[1].split("</p>", 1)[0]
    assert ("profiled step 647 ms, measured 70.0 ms unprofiled: the profiler made steps 9.2x slower; "
            "ms are scaled to the measured step, shares are the profiled step&#39;s.") in said
    # the chart: each row's breakdown scaled to its own measured step
    _, data = report_html.run_context(doc, tmp_path)
    bars = {r["name"]: r for r in data["rows"]}
    assert sum(bars["baseline"]["breakdown"].values()) == pytest.approx(70.0) and bars["baseline"]["breakdown_scaled"]
    assert bars["01-amp"]["breakdown"] == {"forward": 37.5, "backward": 12.5}
    assert bars["01-amp"]["profiled_step_time_ms"] == 400.0 and bars["01-amp"]["breakdown_scaled"]
    assert bars["00-baseline-repeat"]["breakdown"] == {} and not bars["00-baseline-repeat"]["breakdown_scaled"]
    ladder = text.split('id="ladder"', 1)[1].split("</table>", 1)[0]
    assert 'title="profiled step 400 ms, measured 50.0 ms unprofiled: the profiler made steps 8.0x slower;' in ladder
    # without a measured step: the profiled step as before, nothing said of overhead
    text = report_html.render_html(cpu_doc(measured=None), tmp_path)
    table = text.split('id="breakdown"', 1)[1].split("</table>", 1)[0]
    assert "scaled to measured" not in table and '<th class="num">ms / step</th>' in table
    assert "<td><b>profiled step</b></td>" in table and 'id="profiler-overhead"' not in text
    assert "323.50" in table


def test_json_summary_gives_the_scaled_breakdown_and_the_overhead():
    from advisor import results
    s = results.json_summary(cpu_doc())
    assert s["breakdown"] == CPU_BREAKDOWN and s["profiled_step_time_ms"] == 647.0 and s["step_time_ms"] == 70.0
    assert s["profiler_overhead"] == pytest.approx(647 / 70)
    assert sum(s["breakdown_scaled_to_measured"].values()) == pytest.approx(70.0)
    s = results.json_summary(cpu_doc(measured=None))
    assert s["profiler_overhead"] is None and s["breakdown_scaled_to_measured"] is None and s["breakdown"] == CPU_BREAKDOWN


@needs_chromium
def test_gpu_runs_show_the_roofline_the_ceiling_and_a_short_scripts_own_traces(tmp_path):
    """H100 runs: MFU against the dtype's peak and the data-free ceiling (MNIST through PIL
    transforms, preloaded), and the profiler tutorial's ten steps: their schedule and its traces."""
    mnist = copy_run(RUNS / "mnist_preload_mfu_h100", tmp_path / "mnist")
    assert advisor("report", mnist).returncode == 0
    page = chromium.open_page(mnist / "index.html")
    assert_clean(page)
    table = page.dom.split('id="roofline-table"', 1)[1].split("</table>", 1)[0]
    doc = rundir.read_json(mnist / "run.json")
    rf = doc["roofline"]
    assert rf["flops_per_sample"] > 0 and rf["ceiling"]["samples_per_s"] > rf["baseline"]["samples_per_s"]
    for key in ("baseline", "stack", "ceiling"):
        assert f'id="roofline-{key}"' in table
    assert "989" in table and "bf16" in table and "tf32" in table
    assert f'{rf["stack"]["mfu"] * 100:.1f}%' in table
    tutorial = copy_run(RUNS / "profiler_tutorial_h100", tmp_path / "tutorial")
    assert advisor("report", tutorial).returncode == 0
    page = chromium.open_page(tutorial / "index.html")
    assert_clean(page)
    assert 'id="schedule"' in page.dom and "the script trains 10 steps" in page.dom
    own = page.dom.split('id="own-traces"', 1)[1].split("</p>", 1)[0]
    assert "resnet18" in own and ".pt.trace.json" in own


def test_a_run_document_is_checked_against_its_contract_where_it_is_written(tmp_path):
    """Every recorded run keeps the contract; a document that breaks it fails where it is
    written, naming the key, and nothing is written."""
    from advisor.contracts import ContractError, check_run

    for path in sorted(RUNS.glob("*/run.json")):
        check_run(rundir.read_json(path))
    doc = rundir.read_json(RUNS / "mnist_preload_mfu_h100" / "run.json")
    rundir.write_run(tmp_path, doc)
    assert rundir.read_json(tmp_path / "run.json")["status"] == doc["status"]
    for broken, needle in ((dict(doc, status="done"), "status 'done'"),
                           (dict(doc, trials=[{"name": "01-amp", "status": "maybe"}]), "trials[0] (01-amp)"),
                           (dict(doc, findings=[{"severity": "warning"}]), "findings[0] has no code"),
                           ({k: v for k, v in doc.items() if k != "measurement"}, "'measurement' must be dict")):
        with pytest.raises(ContractError, match=re.escape(needle)):
            rundir.write_run(tmp_path / "new", broken)
    assert not (tmp_path / "new").exists()


def test_one_renderer_interface_over_saved_runs(tmp_path):
    """html, terminal and compare render saved runs through one entry point."""
    from advisor.report import SavedRun, render

    run = SavedRun.load(RUNS / "mnist_preload_mfu_h100")
    html = render("html", run)
    assert html.lower().startswith("<!doctype html>") and 'id="roofline-table"' in html
    text = render("terminal", run)
    assert "throughput" in text and "MFU" in text and max(map(len, text.splitlines())) <= 80
    page = render("compare", SavedRun.load(RUNS / "cifar_slow_h200"), SavedRun.load(RUNS / "cifar_tuned_h200"))
    assert 'id="breakdown"' in page
    with pytest.raises(ValueError, match="no renderer 'pdf'"):
        render("pdf", run)
    with pytest.raises((OSError, ValueError)):
        SavedRun.load(tmp_path / "nothing")


@needs_chromium
def test_a_run_of_two_ranks_shows_each_rank_in_chromium(tmp_path):
    """`--nproc-per-node 2` on 2 H200s over NCCL (reports/examples/ddp_resnet-nproc2-h200): the
    page re-rendered from its run.json shows each rank's step, phases and NCCL time, cleanly."""
    src = REPO / "reports" / "examples" / "ddp_resnet-nproc2-h200"
    run = copy_run(src, tmp_path / "ddp")
    assert advisor("report", run).returncode == 0
    page = chromium.open_page(run / "index.html", screenshot=ARTIFACTS / "report-ranks.png")
    assert_clean(page)
    dom = page.dom
    table = dom.split('id="ranks-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 3 and "cuda:0" in table and "cuda:1" in table
    for needle in ("65.37 ms", "64.99 ms", "1.44 ms", "0.61 ms"):   # steps, NCCL, exposed NCCL
        assert needle in table, needle
    assert "3,916" in dom   # samples/s over both ranks


@needs_chromium
def test_the_ddp_trial_reports_its_scaling_against_one_gpu_in_chromium(tmp_path):
    """The ddp trials on 2 H200s (reports/examples/resnet_*-ddp-h200): accepted at >= 1.8x one
    GPU's samples/s; for the nn.DataParallel script one GPU is a reference run of its own
    (DataParallel given one device). The re-rendered page says both."""
    for name, one_gpu_run in (("resnet_single_gpu-ddp-h200", None), ("resnet_dataparallel-ddp-h200", "01-ddp-one-gpu")):
        run = copy_run(REPO / "reports" / "examples" / name, tmp_path / name)
        doc = json.loads((run / "run.json").read_text())
        ddp = next(t for t in doc["trials"] if t["fix"] == "ddp")
        sc = ddp["scaling"]
        assert ddp["status"] == "accepted" and sc["gpus"] == 2 and sc["speedup_vs_one_gpu"] >= 1.8
        assert sc["speedup_vs_one_gpu"] == pytest.approx(ddp["samples_per_s"] / sc["one_gpu_samples_per_s"])
        refs = [t for t in doc["trials"] if t["fix"] == "one-gpu"]
        if one_gpu_run is None:
            assert not refs and sc["one_gpu_source"] == "the runs it was judged against"
        else:
            assert [t["name"] for t in refs] == [one_gpu_run] and refs[0]["status"] == "reference"
            assert sc["one_gpu_source"] == one_gpu_run
            assert sc["one_gpu_samples_per_s"] == pytest.approx(refs[0]["samples_per_s"])
        assert advisor("report", run).returncode == 0
        page = chromium.open_page(run / "index.html")
        assert_clean(page)
        assert f"{sc['speedup_vs_one_gpu']:.2f}x one GPU's samples/s on 2 GPUs (scaling efficiency {sc['efficiency']:.0%})" in page.dom



def test_ladder_shows_each_trials_gpu_and_compile_time(tmp_path):
    """Trials run side by side (advisor.trials.gpus): a row names its GPU and the offset its
    step times were divided by; a compiled trial's one-off cell gives torch.compile's share."""
    doc = rundir.read_json(LADDER_H200 / "run.json")
    row = next(t for t in doc["trials"] if t["name"] == "02-dataloader-workers-4")
    row.update(gpu="2", gpu_offset=1.031, compile_s=12.34)
    text = report_html.render_html(doc, tmp_path)
    ladder = text.split('id="ladder"', 1)[1].split("</table>", 1)[0]
    shown = ladder.split("(02-dataloader-workers-4)", 1)[1].split("</tr>", 1)[0]
    assert "on GPU 2, its step times divided by its offset 1.031" in shown
    assert "compile 12.3 s" in shown
    assert ladder.count("trial-gpu") == 1   # the other rows ran on the one GPU
    # loaded from the analyze's compile cache: the cell gives the compile a fresh run pays
    row.update(compile_s=3.21, compile_cold_s=41.5)
    shown = report_html.render_html(doc, tmp_path).split("(02-dataloader-workers-4)", 1)[1].split("</tr>", 1)[0]
    assert "compile 41.5 s (here loaded in 3.2 s)" in shown
