#!/usr/bin/env python3
# Whether one request's grammar holds up the others: a greedy stream runs on a `wushkv serve`
# while a request with a wide grammar (R chained alternatives, `r_i ::= "x" | r_(i+1)`, so R parse
# stacks at its start, none of whose characters the model wants first) and n choices is admitted
# and generates a few tokens. Prints the grammar request's time and the stream's gaps between
# tokens (median and largest): where a grammar's work runs on the engine thread unbounded, the
# largest gap grows to seconds; bounded, it stays near a step's time.
# With --costly: what a grammar that spends a step's whole work budget costs (wushkv/grammar.h):
# one-token requests sampled with top_p 0.9 (every token masked), with and without a grammar of
# 4000 alternatives each wanting a letter and then a character of its own, alternating.
#
#   wushkv serve --kv f16 --port 8080 &
#   python3 scripts/grammar_stall.py http://127.0.0.1:8080 [--n 16] [--rules 3000]
#   python3 scripts/grammar_stall.py http://127.0.0.1:8080 --costly [--rounds 3]
import argparse
import json
import threading
import time

import requests


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("url")
    ap.add_argument("--n", type=int, default=16, help="choices of the grammar request")
    ap.add_argument("--rules", type=int, default=3000, help="chained alternatives in the grammar")
    ap.add_argument("--costly", action="store_true", help="time the grammar that spends a step's budget instead")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.costly:
        return costly(a)
    gbnf = "\n".join(["root ::= r0"] + [f'r{i} ::= "x" | r{i + 1}' for i in range(a.rules)] + [f'r{a.rules} ::= "end"'])
    gaps = []

    def stream():
        body = {"prompt": "Once upon a time", "max_tokens": 120, "stream": True, "temperature": 0}
        last = None
        with requests.post(a.url + "/v1/completions", json=body, stream=True, timeout=600) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    now = time.monotonic()
                    if last is not None:
                        gaps.append(now - last)
                    last = now

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(2.0)  # the stream is decoding when the grammar request comes
    t0 = time.monotonic()
    r = requests.post(a.url + "/v1/completions", timeout=600, json={
        "prompt": "Say:", "max_tokens": 4, "n": a.n, "grammar": gbnf, "temperature": 0})
    took = time.monotonic() - t0
    t.join()
    print(f"grammar: {len(gbnf)} bytes, {a.rules} alternatives, n {a.n}: HTTP {r.status_code} in {took:.2f} s",
          json.dumps(r.json()["choices"][0]["text"]) if r.ok else r.text[:200])
    gaps.sort()
    if gaps:
        print(f"stream beside it: {len(gaps) + 1} tokens, gap median {gaps[len(gaps) // 2] * 1000:.0f} ms, "
              f"largest {gaps[-1] * 1000:.0f} ms")


def costly(a):
    wide = "root ::= " + " | ".join(f"w{i}" for i in range(4000)) + "\n" + \
        "".join(f"w{i} ::= [a-z] [\\u{0x100 + i:04X}]\n" for i in range(4000))
    body = {"prompt": "x", "max_tokens": 1, "temperature": 1, "top_p": 0.9}
    for _ in range(a.rounds):
        times = []
        for extra in ({}, {"grammar": wide}):
            t0 = time.monotonic()
            r = requests.post(a.url + "/v1/completions", json={**body, **extra}, timeout=600)
            times.append((time.monotonic() - t0, r.status_code))
        print(f"plain {times[0][0] * 1000:.0f} ms (HTTP {times[0][1]}), "
              f"4000-way grammar {times[1][0] * 1000:.0f} ms (HTTP {times[1][1]})")


if __name__ == "__main__":
    main()
