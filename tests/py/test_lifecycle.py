# A second daemon with --api-key, --cors-origin and a wider batch: authentication, CORS, 32
# concurrent streams (each equal to the same request alone), and the SIGTERM drain (in-flight
# requests finish, new ones get 503, exit status 0).
import concurrent.futures as cf
import json
import signal
import subprocess
import threading
import time

import pytest
import requests

from conftest import Server, wait_idle

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "My favourite colour is", "Water boils at",
           "The quick brown fox", "In the beginning", "Dear diary, today", "import numpy as"]


@pytest.fixture(scope="module")
def srv():
    s = Server("--ctx", "256", "--max-batch", "8", "--max-queue", "32", "--api-key", KEY,
               "--cors-origin", "https://example.org", "--drain-timeout", "60")
    yield s
    s.stop(signal.SIGKILL)


def test_auth(srv):
    r = requests.get(srv.url + "/v1/models", timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = requests.get(srv.url + "/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert r.status_code == 401
    assert requests.get(srv.url + "/v1/models", headers=AUTH, timeout=10).status_code == 200
    # Probes and scrapers need no key.
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    assert requests.get(srv.url + "/metrics", timeout=10).status_code == 200


def test_auth_refused_before_the_body_is_sent(srv):
    # curl asks for 100 Continue before a body over 1 MiB; without a key the answer is the 401 at
    # once (curl then sends nothing), not 100 Continue, an upload, and the 401 after it.
    body = json.dumps({"prompt": "word " * 220000})  # 1.1 MB
    p = subprocess.run(["curl", "-s", "-w", "\n%{http_code} %{size_upload}", f"{srv.url}/v1/completions",
                        "-H", "Content-Type: application/json", "--data-binary", "@-"],
                       input=body, capture_output=True, text=True, timeout=60)
    code, uploaded = p.stdout.rsplit("\n", 1)[1].split()
    assert code == "401" and json.loads(p.stdout.rsplit("\n", 1)[0])["error"]["code"] == "invalid_api_key", p.stdout[-300:]
    assert float(uploaded) < len(body), uploaded
    assert requests.get(srv.url + "/v1/models", headers=AUTH, timeout=10).status_code == 200


def test_cors(srv):
    r = requests.options(srv.url + "/v1/chat/completions", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "POST"}, timeout=10)
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "https://example.org"
    assert "Authorization" in r.headers["access-control-allow-headers"]
    r = requests.get(srv.url + "/v1/models", headers=AUTH, timeout=10)
    assert r.headers["access-control-allow-origin"] == "https://example.org"


def stream(srv, prompt, max_tokens=4):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    text = ""
    with requests.post(srv.url + "/v1/completions", json=body, headers=AUTH, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                text += json.loads(line[6:])["choices"][0]["text"]
    return text


def test_32_concurrent_streams(srv):
    alone = {p: stream(srv, p) for p in PROMPTS}
    work = PROMPTS * 4
    with cf.ThreadPoolExecutor(len(work)) as ex:
        together = list(ex.map(lambda p: stream(srv, p), work))
    for p, t in zip(work, together):
        assert t == alone[p], f"{p!r}: alone {alone[p]!r}, with 31 others {t!r}"
    wait_idle(srv)


def test_sigterm_drains(srv):
    session = requests.Session()  # a keep-alive connection opened before the signal
    assert session.get(srv.url + "/health", timeout=10).status_code == 200
    result = {}
    streaming = threading.Event()

    # Long enough to still be generating after the signal on a fast machine, short enough to
    # finish well inside the 30 s drain on a slow one.
    def run():
        body = {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0, "stream": True}
        lines = []
        with requests.post(srv.url + "/v1/completions", json=body, headers=AUTH, stream=True, timeout=120) as r:
            for l in r.iter_lines():
                if l:
                    lines.append(l)
                    streaming.set()
        result["lines"] = lines

    t = threading.Thread(target=run)
    t.start()
    assert streaming.wait(60)  # the request is in flight: its first chunk arrived
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    r = session.get(srv.url + "/health", timeout=10)
    assert r.status_code == 503 and r.json()["status"] == "draining"
    r = session.post(srv.url + "/v1/completions", json={"prompt": "x"}, headers=AUTH, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "draining"
    t.join(120)
    lines = result["lines"]
    assert lines[-1] == b"data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"
    assert srv.proc.wait(60) == 0
    assert "stopped" in srv.log()


def test_drain_deadline_aborts_and_exits_0():
    s = Server("--ctx", "512", "--max-batch", "2", "--drain-timeout", "1")
    try:
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Tell me a story.", "max_tokens": 400,
                                                            "temperature": 0, "stream": True}, stream=True, timeout=60)
        lines = r.iter_lines()
        assert next(l for l in lines if l).startswith(b"data: ")
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(30) == 0
        assert time.time() - t0 < 10  # 1 s deadline, then the running request is aborted
        rest = []
        try:
            rest = list(lines)
        except requests.exceptions.RequestException:
            pass  # the chunked body was cut: the connection was closed
        assert b"data: [DONE]" not in rest  # aborted, not finished
        assert "aborting 1 request" in s.log()
    finally:
        s.stop(signal.SIGKILL)
