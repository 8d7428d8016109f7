# Continuous batching: concurrent streams each produce what the same request produces alone
# (temperature 0), the queue limit answers 429 with Retry-After, and a short prompt is not held
# behind a long one's prefill.
import concurrent.futures as cf
import json
import threading
import time

import requests

from conftest import Server, wait_idle

PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4,",
    "My favourite colour is",
    "Water boils at",
    "The quick brown fox",
    "In the beginning",
]


def stream_text(server, prompt, max_tokens=8):
    """One streamed completion with raw SSE parsing; returns (text, finish_reason)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    text, finish = "", None
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        done = False
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith(b"data: ")
            data = line[6:]
            if data == b"[DONE]":
                done = True
                continue
            ch = json.loads(data)["choices"][0]
            text += ch["text"]
            finish = ch["finish_reason"] or finish
        assert done
    return text, finish


def test_concurrent_streams_equal_alone(server):
    alone = [stream_text(server, p) for p in PROMPTS]
    # Six at once with four sequence slots: four run batched, two wait in the queue and join the
    # batch as slots free up (prefill chunks mixed with other sequences' decode steps).
    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(lambda p: stream_text(server, p), PROMPTS))
    for p, a, t in zip(PROMPTS, alone, together):
        assert a == t, f"{p!r}: alone {a!r} vs batched {t!r}"
    wait_idle(server)


def test_queue_limit_429(server):
    # 4 running + 2 queued is the limit; the rest are refused at once.
    def one(i):
        r = requests.post(server.url + "/v1/completions",
                          json={"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 4, "temperature": 0},
                          timeout=120)
        return r.status_code, r.headers.get("retry-after"), r.json()

    with cf.ThreadPoolExecutor(9) as ex:
        results = list(ex.map(one, range(9)))
    codes = sorted(r[0] for r in results)
    assert codes.count(200) >= 6 and 429 in codes, codes
    for code, retry, body in results:
        if code == 429:
            assert retry == "1" and body["error"]["type"] == "rate_limit_error"
    wait_idle(server)


def test_short_prompt_not_held_behind_a_long_prefill():
    # A 900-token prompt takes 7 steps of 128 tokens to prefill; a 2-token prompt sent during the
    # first of them is prefilled beside it (the oldest prefill keeps a quarter of each step, the
    # others go shortest first), not after all of it. Before: the short request ended with the
    # long one (4.5 s against 4.9 s), now in about a quarter of its time.
    s = Server("--kv", "f16", "--ctx", "1024", "--max-batch", "4", "--batch-tokens", "128")
    try:
        out = {}

        def long_request():
            t = time.time()
            r = requests.post(s.url + "/v1/completions", timeout=120,
                              json={"prompt": [2] + [236743 + (j * 7) % 300 for j in range(900)], "max_tokens": 1})
            out["long"] = (r.status_code, time.time() - t)

        th = threading.Thread(target=long_request)
        th.start()
        time.sleep(0.3)
        t = time.time()
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=120)
        short = time.time() - t
        th.join()
        assert r.status_code == 200 and out["long"][0] == 200, (r.text, out)
        assert short < 0.6 * out["long"][1], (short, out["long"])
    finally:
        assert s.stop() == 0, s.log()
