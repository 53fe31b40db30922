"""Open a local HTML file in real headless Chromium and report what happened.

    page = open_page(path, screenshot=path_png)   # one browser run, a fresh profile
    page.dom           the DOM after the page's scripts ran (--dump-dom)
    page.console       console messages (errors, uncaught exceptions, CSP violations, logs)
    page.requests      URLs the *page* asked the network for (file:, data:, about:, blob: excluded)
    page.body_attrs    attributes of <body> in the final DOM (data-ready, data-errors)

No extra Python packages and no browser download: it drives the system `chromium` (Debian
package; `.ci/run` installs it) from the command line. Console messages come from Chromium's
stderr log (`--enable-logging=stderr --v=0` prints every console message of the page as
`...:CONSOLE:N] "message", source: URL (line)`); requests from a net log (`--log-net-log`):
every URL_REQUEST_START_JOB whose initiator is the page (Chromium's own background traffic
is initiated by "not an origin"). DNS is mapped to nothing (`--host-resolver-rules`), so even a
request the page did make cannot leave the machine.
"""

from __future__ import annotations

import dataclasses
import html.parser
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps",
         "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars",
         "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0"]
_CONSOLE = re.compile(r":CONSOLE(?::\d+)?\]\s*(.*)$")
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome:", "chrome-error:")


def chromium() -> str | None:
    for name in (os.environ.get("ADVISOR_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@dataclasses.dataclass
class Page:
    dom: str
    console: list[str]
    requests: list[str]
    body_attrs: dict
    stderr: str


class _Body(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.attrs: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "body" and self.attrs is None:
            self.attrs = dict(attrs)


def _net_requests(netlog: Path) -> list[str]:
    if not netlog.is_file():
        return []
    text = netlog.read_text(errors="replace").rstrip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:  # the browser may exit before closing the JSON
        doc = json.loads(text.rstrip(",") + "]}")
    types = {v: k for k, v in (doc.get("constants") or {}).get("logEventTypes", {}).items()}
    out = []
    for ev in doc.get("events") or []:
        if types.get(ev.get("type")) != "URL_REQUEST_START_JOB":
            continue
        p = ev.get("params") or {}
        url = str(p.get("url") or "")  # the job's BEGIN event names the URL; its END does not
        if not url or p.get("initiator") == "not an origin" or url.startswith(LOCAL_SCHEMES):
            continue
        out.append(url)
    return out


def open_page(path: Path, screenshot: Path | None = None, window=(1280, 2400), budget_ms: int = 5000,
              timeout: float = 120.0) -> Page:
    exe = chromium()
    if exe is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium; .ci/run does)")
    with tempfile.TemporaryDirectory(prefix="advisor-chromium-") as tmp:
        netlog = Path(tmp) / "net.json"
        cmd = [exe, *FLAGS, f"--user-data-dir={tmp}/profile", f"--log-net-log={netlog}",
               f"--virtual-time-budget={budget_ms}", f"--window-size={window[0]},{window[1]}"]
        if screenshot is not None:
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            cmd.append(f"--screenshot={Path(screenshot).absolute()}")
        cmd += ["--dump-dom", Path(path).absolute().as_uri()]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        console = [m.group(1) for line in r.stderr.splitlines() if (m := _CONSOLE.search(line))]
        requests = _net_requests(netlog)
    body = _Body()
    body.feed(r.stdout)
    return Page(dom=r.stdout, console=console, requests=requests, body_attrs=body.attrs or {}, stderr=r.stderr)
