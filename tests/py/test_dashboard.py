# GET /dashboard in a real browser: headless Chromium (Debian's) loads the page while a load runs,
# and the test reads from the live DOM (over the DevTools protocol) that every chart and the
# request table received data, then saves a screenshot. Also the page's JSON (/dashboard/state).
import base64
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from conftest import PLAIN, ROOT, Server, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def int2_server():
    s = Server("--kv", "int2", *PLAIN, "--ctx", "512", "--max-batch", "4", "--max-queue", "16")
    yield s
    assert s.stop() == 0, s.log()


def load(server, stop, n_clients=4):
    """Closed-loop completions until `stop` is set."""
    def client():
        while not stop.is_set():
            requests.post(server.url + "/v1/completions",
                          json={"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}, timeout=120)
    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in threads:
        t.start()
    return threads


def test_dashboard_state(int2_server):
    st = requests.get(int2_server.url + "/dashboard/state", timeout=10).json()
    assert st["ready"] and st["kv_format"].startswith("int2") and st["bits_per_element"] > 0
    assert st["pool"]["capacity_bytes"] > 0 and st["pool"]["used_bytes"] == 0 and st["requests"] == []
    stop = threading.Event()
    threads = load(int2_server, stop)
    try:
        seen = None
        deadline = time.time() + 60
        while time.time() < deadline and not seen:
            st = requests.get(int2_server.url + "/dashboard/state", timeout=10).json()
            if st["requests"] and st["pool"]["used_bytes"] > 0:
                seen = st
            time.sleep(0.05)
        assert seen, "no live request seen"
        r = seen["requests"][0]
        assert set(r) == {"id", "state", "prompt_tokens", "generated_tokens", "kv_bytes", "fp16_bytes", "age_s"}
        # 2.5 bits/element against 16: the f16 equivalent of the same tokens is up to ~6x what int2
        # holds (whole 16-token blocks in every layer group make ours larger for short sequences).
        p = seen["pool"]
        assert p["fp16_bytes"] > p["used_bytes"] > 0, p
    finally:
        stop.set()
        for t in threads:
            t.join()


class Browser:
    """Headless Chromium driven over the DevTools protocol (websocket-client)."""

    def __init__(self):
        import websocket

        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="wushkv-chromium-")
        self.proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                      f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
                                      "--window-size=1280,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            try:
                pages = requests.get(f"http://127.0.0.1:{self.port}/json/list", timeout=2).json()
                page = next(p for p in pages if p["type"] == "page")
                break
            except (requests.RequestException, StopIteration, ValueError):
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        self.last_exception = r.get("exceptionDetails")
        return r["result"].get("value")

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (scripts/install-deps.sh installs it)")
def test_dashboard_in_a_browser(int2_server):
    stop = threading.Event()
    threads = load(int2_server, stop)
    browser = Browser()
    try:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=int2_server.url + "/dashboard")
        # Until every chart has a few samples and the table has listed live requests (the page
        # polls once a second).
        state = None
        deadline = time.time() + 90
        while time.time() < deadline:
            state = browser.eval("""JSON.stringify({
                kv: +document.getElementById('chart-kv').dataset.points,
                tps: +document.getElementById('chart-tps').dataset.points,
                lat: +document.getElementById('chart-lat').dataset.points,
                rows: +document.getElementById('requests').dataset.rowsSeen,
                lines: document.querySelectorAll('svg polyline').length,
                kvHeld: document.getElementById('s-kv').textContent,
                err: document.getElementById('err').textContent})""")
            state = json.loads(state) if state else None
            if state and min(state["kv"], state["tps"], state["lat"]) >= 4 and state["rows"] >= 1:
                break
            time.sleep(0.5)
        assert state and min(state["kv"], state["tps"], state["lat"]) >= 4 and state["rows"] >= 1, \
            (state, browser.last_exception, browser.eval("document.documentElement.outerHTML.slice(0, 300)"))
        assert state["lines"] == 7 and state["err"] == "", state  # 3 + 2 + 2 series drawn, no fetch error
        shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
        out = pathlib.Path(os.environ.get("WUSHKV_SCREENSHOT_DIR", tempfile.gettempdir())) / "dashboard.png"
        out.write_bytes(shot)
    finally:
        browser.close()
        stop.set()
        for t in threads:
            t.join()


def metric_sum(server, name):
    text = requests.get(server.url + "/metrics", timeout=10).text
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("wushkv:" + name + "{"))


def test_vllm_latency_metrics(int2_server):
    # vLLM's per-request and per-token series: one ITL sample per output token after the first,
    # one prefill/decode/TPOT/max_tokens sample per request.
    names = ["inter_token_latency_seconds_count", "request_prefill_time_seconds_count",
             "request_decode_time_seconds_count", "request_time_per_output_token_seconds_count",
             "request_params_max_tokens_count", "request_params_max_tokens_sum", "iteration_tokens_total_count"]
    before = {n: metric_sum(int2_server, n) for n in names}
    r = requests.post(int2_server.url + "/v1/completions", json={"prompt": "The capital of France is",
                      "max_tokens": 12, "temperature": 0, "logit_bias": {"1": -100, "106": -100}}, timeout=120)
    assert r.status_code == 200, r.text
    n = r.json()["usage"]["completion_tokens"]
    assert n >= 2
    time.sleep(0.2)
    d = {k: metric_sum(int2_server, k) - before[k] for k in names}
    assert d["inter_token_latency_seconds_count"] == n - 1, d
    assert d["request_prefill_time_seconds_count"] == d["request_decode_time_seconds_count"] == 1, d
    assert d["request_time_per_output_token_seconds_count"] == 1, d
    assert d["request_params_max_tokens_count"] == 1 and d["request_params_max_tokens_sum"] == 12, d
    assert d["iteration_tokens_total_count"] >= n, d
