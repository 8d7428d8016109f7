#!/usr/bin/env python3
# What scoring a prompt costs a running `wushkv serve`: the same text sent plain (max_tokens 1, no
# echo) and scored (max_tokens 0, echo, logprobs 1: what lm-evaluation-harness asks for), the
# prefix cache emptied before each (POST /reset_prefix_cache), alternating, in one invocation.
# Prints each pair's seconds and ratio, and the scored text's mean negative log-likelihood per
# token (its first token, which nothing predicts, left out). Then the two paths against each
# other: 24 greedy tokens after the text's first --head-chars characters, their logprobs as decoded
# (a token a step) and as the same tokens scored in a prompt, and the largest difference.
#
#   wushkv serve --port 8080 &
#   python3 scripts/echo_cost.py http://127.0.0.1:8080 FILE [--chars 2400] [--rounds 2] [--head-chars 200]
#       [--stall-choices N]
#
# --stall-choices N: then the text scored with 20 alternatives in both shapes (echo's logprobs and
# prompt_logprobs) for N choices, while a stream decodes 900 tokens beside it: the request's size
# and time, and the stream's largest and median gap between chunks (what one request's entries,
# built into one response on the loop thread, cost the others).
import argparse
import threading
import time

import requests


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("url")
    ap.add_argument("file", help="a UTF-8 text; its first --chars characters are sent")
    ap.add_argument("--chars", type=int, default=2400)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--head-chars", type=int, default=200)
    ap.add_argument("--stall-choices", type=int, default=0)
    args = ap.parse_args()
    with open(args.file, encoding="utf-8") as f:
        text = f.read()[: args.chars]

    def timed(body):
        r = requests.post(args.url + "/reset_prefix_cache", json={}, timeout=60)
        r.raise_for_status()
        t = time.monotonic()
        r = requests.post(args.url + "/v1/completions", json={"prompt": text, **body}, timeout=3600)
        r.raise_for_status()
        return time.monotonic() - t, r.json()

    for _ in range(args.rounds):
        plain_s, plain = timed({"max_tokens": 1, "temperature": 0})
        scored_s, scored = timed({"max_tokens": 0, "echo": True, "logprobs": 1})
        lps = scored["choices"][0]["logprobs"]["token_logprobs"][1:]
        assert scored["choices"][0]["text"] == text and None not in lps
        print(f"prompt {plain['usage']['prompt_tokens']} tokens: plain {plain_s:.2f} s, scored {scored_s:.2f} s "
              f"({scored_s / plain_s:.2f}x); mean NLL {-sum(lps) / len(lps):.4f} over {len(lps)} tokens")


    head = text[: args.head_chars]
    gen = requests.post(args.url + "/v1/completions", json={"prompt": head, "max_tokens": 24, "temperature": 0,
                                                            "logprobs": 1}, timeout=600).json()["choices"][0]
    n = len(requests.post(args.url + "/tokenize", json={"prompt": head}, timeout=60).json()["tokens"])
    lp = requests.post(args.url + "/v1/completions", json={"prompt": head + gen["text"], "max_tokens": 0, "echo": True,
                                                           "logprobs": 1}, timeout=600).json()["choices"][0]["logprobs"]
    same = lp["tokens"][n:] == gen["logprobs"]["tokens"]
    diff = max(abs(a - b) for a, b in zip(lp["token_logprobs"][n:], gen["logprobs"]["token_logprobs"]))
    print(f"decoded vs scored: {len(gen['logprobs']['tokens'])} tokens after a {n}-token prompt, "
          f"{'the same tokens' if same else 'DIFFERENT tokens (the reply tokenizes otherwise)'}, "
          f"largest logprob difference {diff:.2e}")

    if args.stall_choices:
        stall(args.url, text, args.stall_choices)


def stall(url, text, n):
    gaps = []

    def stream():
        r = requests.post(url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 900, "temperature": 0,
                                                        "stream": True}, stream=True, timeout=3600)
        last = time.monotonic()
        for line in r.iter_lines():
            if line:
                now = time.monotonic()
                gaps.append(now - last)
                last = now

    th = threading.Thread(target=stream)
    th.start()
    time.sleep(2)
    t = time.monotonic()
    r = requests.post(url + "/v1/completions", json={"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 20,
                                                    "prompt_logprobs": 20, "n": n}, timeout=3600)
    took = time.monotonic() - t
    th.join()
    gaps.sort()
    print(f"scored x {n} with 20 alternatives: status {r.status_code}, {len(r.content)} bytes in {took:.1f} s; "
          f"the stream beside it: largest gap {gaps[-1]:.2f} s, median {gaps[len(gaps) // 2]:.3f} s over {len(gaps)} chunks")


if __name__ == "__main__":
    main()
