# Faults under `wushkv serve` on a tiny paged int2 pool (10 blocks of 16 tokens, 3 sequence slots,
# 32-token steps, so a prefill spans several steps and concurrent requests outgrow the pool): a
# client that goes away at every phase of its request (during the headers, during the body,
# between keep-alive requests, while queued, during prefill, mid-stream) leaves no sequence and no
# KV block behind and the others finish; concurrent requests with preemption and random
# disconnects all complete.
import concurrent.futures as cf
import json
import socket
import time

import pytest
import requests

from conftest import PLAIN, Server, metric, wait_idle

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


PROMPTS = [
    "Counting in words: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, "
    "fourteen, fifteen, sixteen, seventeen,",
    "The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday. The months of the "
    "year are January, February, March, April, May,",
    "Here is a long list of the fruits that people buy at the big market every week: apples, bananas, cherries, "
    "dates, figs, grapes, lemons, mangoes, oranges,",
]


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
