# Faults under `wushkv serve` on a tiny paged int2 pool (10 blocks of 16 tokens, 3 sequence slots,
# 32-token steps, so a prefill spans several steps and concurrent requests outgrow the pool): a
# client that goes away at every phase of its request (during the headers, during the body,
# between keep-alive requests, while queued, during prefill, mid-stream) leaves no sequence and no
# KV block behind and the others finish; concurrent requests with preemption and random
# disconnects all complete. Then engine faults on a tiny random model: a --kv-mem beyond the device,
# a truncated or foreign --wush sidecar (exit status 1 with a message), and the model file
# truncated, then removed, under a running server (it goes on answering: serve releases the file
# once loaded).
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import time

import pytest
import requests

from conftest import BIN, LONG_PROMPTS, PLAIN, ROOT, Server, free_port, metric, wait_idle

ABORT = 'finished_reason="abort"'


@pytest.fixture(scope="module")
def pool():
    s = Server("--kv", "int2", *PLAIN, "--kv-mem", "450KiB", "--ctx", "256", "--max-batch", "3", "--max-queue", "8",
               "--batch-tokens", "32")
    assert metric(s, "kv_cache_total_blocks") == 10
    yield s
    rc = s.stop()
    assert rc == 0, f"server exit status {rc} after SIGTERM:\n{s.log()}"


def send(srv, body):
    """A completion request on a raw connection; returns the socket (the answer unread)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def wait_for(cond, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def read_stream(s):
    """Reads an SSE completion stream to its end; returns the last finish_reason."""
    buf = b""
    while b"data: [DONE]" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf[-500:]
        buf += chunk
    reasons = [json.loads(l[6:])["choices"][0]["finish_reason"] for l in buf.split(b"\n")
               if l.startswith(b"data: {")]
    return [r for r in reasons if r][-1]


def still_serving(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 2, "temperature": 0},
                      timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length", r.text


def test_disconnect_before_the_request_is_whole(pool):
    # During the headers, during the body, and idle between two keep-alive requests: nothing reaches
    # the engine, nothing is held.
    s = socket.create_connection(("127.0.0.1", pool.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    s.close()
    s = socket.create_connection(("127.0.0.1", pool.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"prompt\": \"Hel")
    s.close()
    s = socket.create_connection(("127.0.0.1", pool.port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
    s.close()
    wait_idle(pool, held="kv_cache_used_bytes")
    assert metric(pool, "kv_cache_used_blocks") == 0 and metric(pool, "num_requests_waiting") == 0
    still_serving(pool)


def test_disconnect_during_prefill(pool):
    aborted = metric(pool, "request_success_total", ABORT)
    generated = metric(pool, "generation_tokens_total")
    # ~130 tokens: five 32-token steps of prefill before its first token.
    prompt = "one two three four five six seven eight nine ten eleven twelve " * 10
    s = send(pool, {"prompt": prompt, "max_tokens": 4, "temperature": 0})
    wait_for(lambda: metric(pool, "kv_cache_used_blocks") > 0, "the prefill to start")
    assert metric(pool, "generation_tokens_total") == generated  # still prefilling
    s.close()
    wait_idle(pool, held="kv_cache_used_bytes")
    assert metric(pool, "request_success_total", ABORT) == aborted + 1
    assert metric(pool, "generation_tokens_total") == generated  # cut before its first token
    still_serving(pool)


def test_disconnect_while_queued_and_mid_stream(pool):
    aborted = metric(pool, "request_success_total", ABORT)
    # Three streams fill the three slots (2 blocks each: no preemption).
    streams = [send(pool, {"prompt": p, "max_tokens": 24, "temperature": 0, "stream": True})
               for p in ("Once upon a time", "The capital of France is", "1, 2, 3, 4,")]
    for s in streams:
        assert s.recv(65536).startswith(b"HTTP/1.1 200 ")  # accepted; a slot each
    wait_for(lambda: metric(pool, "num_requests_running") == 3, "three running sequences")
    # A fourth waits for a slot; its client goes away while it waits.
    queued = send(pool, {"prompt": "Water boils at", "max_tokens": 24, "temperature": 0})
    wait_for(lambda: metric(pool, "num_requests_waiting") >= 1, "a queued request")
    queued.close()
    # One of the three goes away mid-stream; the other two run to their end.
    streams[0].close()
    assert [read_stream(s) for s in streams[1:]] == ["length", "length"]
    for s in streams[1:]:
        s.close()
    wait_idle(pool, held="kv_cache_used_bytes")
    assert metric(pool, "kv_cache_used_blocks") == 0 and metric(pool, "num_requests_waiting") == 0
    assert metric(pool, "request_success_total", ABORT) == aborted + 2
    still_serving(pool)


PROMPTS = LONG_PROMPTS[:3]


def test_tiny_pool_preemption_with_disconnects(pool):
    # Three ~40-token prompts growing by 16 tokens need 12 blocks of the 10: one is preempted and
    # recomputed; two more clients stream and vanish after their first token. Every request that
    # stays completes, and nothing is held at the end.
    preempted = metric(pool, "num_preemptions_total")

    def stay(p):
        r = requests.post(pool.url + "/v1/completions", json={"prompt": p, "max_tokens": 16, "temperature": 0},
                          timeout=600)
        return r.status_code, r.json()["choices"][0]["finish_reason"], r.json()["usage"]["completion_tokens"]

    def vanish(p):
        s = send(pool, {"prompt": p, "max_tokens": 16, "temperature": 0, "stream": True})
        buf = b""
        while b"data: " not in buf:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
        s.close()

    with cf.ThreadPoolExecutor(5) as ex:
        gone = [ex.submit(vanish, p) for p in ("Tell me a story about a dragon.", "import numpy as")]
        done = list(ex.map(stay, PROMPTS))
        for f in gone:
            f.result()
    assert done == [(200, "length", 16)] * 3, done
    assert metric(pool, "num_preemptions_total") > preempted, pool.log()
    wait_idle(pool, held="kv_cache_used_bytes")
    assert metric(pool, "kv_cache_used_blocks") == 0


# ---- engine faults at serve start and under a running server (a tiny random model: fast) ----------

WRITER = ROOT / "build" / "tests" / "write_tiny_model"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not WRITER.exists() or not os.path.exists(BIN):
        pytest.skip("build/ is not built")
    d = tmp_path_factory.mktemp("faults")
    for name, seed in (("tiny.gguf", "7"), ("other.gguf", "8")):
        subprocess.run([str(WRITER), str(d / name), "gemma3", seed], check=True, capture_output=True)
    return d


def serve_exit(model, *args, timeout=300):
    """Runs serve to its exit; returns (status, stderr)."""
    p = subprocess.run([BIN, "serve", "-m", str(model), "--port", str(free_port()), "--ctx", "64", "--max-batch", "1",
                        *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stderr


def test_kv_mem_beyond_the_device_exits_1(tiny):
    rc, err = serve_exit(tiny / "tiny.gguf", "--kv", "int2", "--kv-transform", "none", "--kv-mem", "1TiB")
    assert rc == 1 and "--kv-mem" in err and "larger than device" in err, err


def test_truncated_or_foreign_sidecar_exits_1(tiny):
    calib = tiny / "calib.txt"
    calib.write_text("The quick brown fox jumps over the lazy dog. " * 200)
    for model in ("tiny", "other"):
        subprocess.run([BIN, "calibrate", "-m", str(tiny / f"{model}.gguf"), "-f", str(calib), "-o",
                        str(tiny / f"{model}.wush"), "--tokens", "256", "--chunk", "128"], check=True,
                       capture_output=True, timeout=300)
    whole = (tiny / "tiny.wush").read_bytes()
    cases = {
        "half.wush": (whole[: len(whole) // 2], "runs past end of file"),
        "head.wush": (whole[:100], "cannot fit"),
        "empty.wush": (b"", "wush"),
    }
    for name, (data, why) in cases.items():
        (tiny / name).write_bytes(data)
    cases["other.wush"] = (None, "another model")
    cases["tiny.gguf"] = (None, "sidecar")  # a GGUF, but a model, not a sidecar
    for name, (_, why) in cases.items():
        rc, err = serve_exit(tiny / "tiny.gguf", "--kv", "int2", "--wush", str(tiny / name))
        assert rc == 1 and why in err, (name, rc, err)
        assert "Traceback" not in err and "Segmentation" not in err


def test_model_file_truncated_then_removed_while_serving(tiny, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes((tiny / "tiny.gguf").read_bytes())
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    p = subprocess.Popen([BIN, "serve", "-m", str(model), "--port", str(port), "--kv", "f16", "--ctx", "64",
                          "--max-batch", "1"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: p.poll() is None and _listening(port) and
                 requests.get(url + "/health", timeout=2).status_code == 200, "the server to be ready", timeout=300)
        # Loaded, then let go: no mapping of the file is left in the process.
        assert str(model) not in open(f"/proc/{p.pid}/maps").read()
        body = {"prompt": "hello world", "max_tokens": 4, "temperature": 0}
        want = requests.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
        for change in (lambda: os.truncate(model, 1000), lambda: model.unlink()):
            change()
            r = requests.post(url + "/v1/completions", json=body, timeout=60)
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == want, r.text
            assert requests.post(url + "/tokenize", json={"prompt": "hello"}, timeout=60).status_code == 200
            r = requests.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                  "max_tokens": 2}, timeout=60)
            assert r.status_code == 200, r.text
        p.terminate()
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
