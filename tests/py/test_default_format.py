# The default KV format under `wushkv serve`, on a tiny random-weight model the test writes (so the
# calibration takes seconds): with no sidecar in the cache the server listens at once, answers 503
# "calibrating" (with Retry-After) while it makes one, then reports the format, its bits/element,
# the bytes per full context and the sampling defaults in /v1/models and the ready line. And
# serve's sampling defaults: used when a request leaves a field out, the request's own value wins.
import os
import re
import subprocess
import time

import pytest
import requests

from conftest import BIN, ROOT, free_port

WRITER = ROOT / "build" / "tests" / "write_tiny_model"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not WRITER.exists() or not os.path.exists(BIN):
        pytest.skip("build/ is not built")
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    subprocess.run([str(WRITER), str(path), "gemma3", "7"], check=True, capture_output=True)
    return path


def start(model, cache, *args):
    port = free_port()
    env = dict(os.environ, WUSHKV_CACHE_DIR=str(cache), WUSHKV_CALIB_TOKENS="512")
    log = open(cache.parent / f"serve-{port}.log", "w")
    p = subprocess.Popen([BIN, "serve", "-m", str(model), "--port", str(port), "--ctx", "256", "--max-batch", "2",
                          *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    return p, f"http://127.0.0.1:{port}", log.name


def stop(p):
    p.terminate()
    assert p.wait(60) == 0


def test_default_format_calibrates_then_reports(tiny, tmp_path):
    cache = tmp_path / "cache"
    p, url, log = start(tiny, cache)
    try:
        seen = set()
        deadline = time.time() + 420  # a cold Mesa shader cache compiles the format's shaders
        while time.time() < deadline:
            assert p.poll() is None, open(log).read()
            try:
                h = requests.get(url + "/health", timeout=2)
            except requests.RequestException:
                time.sleep(0.05)
                continue
            if h.status_code == 200:
                break
            assert h.status_code == 503
            seen.add(h.json()["status"])
            if h.json()["status"] == "calibrating":
                r = requests.get(url + "/v1/models", timeout=2)
                # It may have finished in between: 200, or 503 "loading" (Retry-After 1) while the
                # engine starts.
                if r.status_code == 503 and r.json()["error"]["code"] == "calibrating":
                    assert r.headers["Retry-After"] == "10"
                    seen.add("models 503")
            time.sleep(0.05)
        assert "calibrating" in seen and "models 503" in seen, seen
        m = requests.get(url + "/v1/models", timeout=10).json()["data"][0]
        kv = m["kv_cache"]
        # The default's group of 128 halved to the tiny model's head_dim of 64; sliding layers int4.
        assert kv["format"] == "int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@5 swa:sink0:recent32"
        assert kv["bits_per_element"] > 2.25  # 2.25 for the codes + sliding int4 + the f16 windows' share
        assert os.path.basename(kv["wush_sidecar"]).endswith(".g64.t512.wush")
        assert kv["pool_bytes"] >= kv["bytes_per_context"] > 0
        assert kv["wush_sidecar"].startswith(str(cache)) and os.path.exists(kv["wush_sidecar"])
        assert m["sampling_defaults"] == {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                                          "repeat_penalty": 1, "repeat_last_n": 64}
        text = open(log).read()
        assert "calibrating one from the built-in text" in text
        ready = next(l for l in text.splitlines() if "wushkv: ready:" in l)
        assert "KV int2 quest G64 clip1.2 wush sink16 recent104 swa:int4 keys:int3@5 swa:sink0:recent32 (" in ready and "bits/element" in ready
        assert "per full context" in ready and "sampling defaults temp 0.8 top_k 40 top_p 0.95 min_p 0.05" in ready
    finally:
        stop(p)


def test_sampling_defaults_apply_when_omitted(tiny, tmp_path):
    # Greedy by default (--temp 0): a request without temperature equals one with temperature 0;
    # a request's own temperature wins over the default.
    p, url, log = start(tiny, tmp_path / "cache", "--kv", "f16", "--temp", "0", "--top-k", "5")
    try:
        deadline = time.time() + 420
        while time.time() < deadline:
            assert p.poll() is None, open(log).read()
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        sd = requests.get(url + "/v1/models", timeout=10).json()["data"][0]["sampling_defaults"]
        assert sd["temperature"] == 0 and sd["top_k"] == 5

        def complete(**fields):
            body = {"prompt": "the quick brown fox", "max_tokens": 12, **fields}
            r = requests.post(url + "/v1/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]

        greedy = complete(temperature=0)
        assert complete() == greedy and complete(seed=1) == complete(seed=2) == greedy
        drawn = {complete(temperature=2.0, top_k=0, seed=s) for s in range(4)}
        assert drawn != {greedy}
    finally:
        stop(p)


def test_stop_while_calibrating(tiny, tmp_path):
    # SIGTERM during a calibration stops it between chunks (8 chunks of 512 tokens here): the
    # server exits 0 promptly and leaves neither a sidecar nor a temporary file.
    cache = tmp_path / "cache"
    port = free_port()
    env = dict(os.environ, WUSHKV_CACHE_DIR=str(cache), WUSHKV_CALIB_TOKENS="4096")
    with open(tmp_path / "serve.log", "w") as logf:
        p = subprocess.Popen([BIN, "serve", "-m", str(tiny), "--port", str(port)], stdout=logf,
                             stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        assert p.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            if requests.get(url + "/health", timeout=2).json()["status"] == "calibrating":
                break
        except requests.RequestException:
            pass
        time.sleep(0.05)
    else:
        raise AssertionError("never saw calibrating:\n" + (tmp_path / "serve.log").read_text())
    p.terminate()
    assert p.wait(120) == 0, (tmp_path / "serve.log").read_text()
    text = (tmp_path / "serve.log").read_text()
    m = re.search(r"calibration stopped after (\d+) of (\d+) chunks", text)
    assert m and int(m.group(1)) < int(m.group(2)) == 8, text  # stopped early, not run to its end
    assert not cache.exists() or list(cache.iterdir()) == []
