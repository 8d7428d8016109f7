#!/usr/bin/env python3
# What structured output costs a running `wushkv serve`: the time per output token of the same
# completion with and without a constraint, alternating, in one invocation, so the ratio compares
# like with like. The constraints are wide open (any 400 characters but a newline; a JSON string
# of 400 characters; any characters but a newline until a DEL no model writes unasked), so almost
# every token stays allowed and the generation runs to max_tokens: where the mask's work is
# largest. Four samplers: greedy (the best tokens checked one by one),
# the server's default top_k (the same for its k best), vLLM's defaults (temperature 1, nothing
# truncated: a draw checked, rejection sampling) and top_p alone (every token of the vocabulary
# masked at every step).
#
#   wushkv serve --port 8080 &
#   python3 scripts/grammar_cost.py http://127.0.0.1:8080 [--tokens 64] [--rounds 3]
import argparse
import statistics
import time

import requests

CONSTRAINTS = {
    "regex [^\\n]{400}": {"guided_regex": "[^\\n]{400}"},
    "a JSON string, 400 ch": {"guided_json": {"type": "string", "minLength": 400, "maxLength": 400}},
    # unbounded: the same state after every character, so the masks after the first come cached
    "regex [^\\n]*\\x7f": {"guided_regex": "[^\\n]*\\x7f"},
}


def ms_per_token(url, sampling, constraint, tokens):
    body = {"prompt": "Once upon a time", "max_tokens": tokens, "seed": 1, **sampling, **constraint}
    t0 = time.perf_counter()
    r = requests.post(url + "/v1/completions", json=body, timeout=600)
    dt = time.perf_counter() - t0
    r.raise_for_status()
    n = r.json()["usage"]["completion_tokens"]
    return 1000 * dt / n, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    samplers = {"greedy": {"temperature": 0}, "top_k 40": {"temperature": 0.8, "top_k": 40},
                "t 1, no truncation": {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0},
                "top_p 0.95 (mask)": {"temperature": 0.8, "top_k": -1, "top_p": 0.95, "min_p": 0.0}}
    print(f"{a.tokens} output tokens, {a.rounds} rounds, constrained and plain alternating")
    for cname, constraint in CONSTRAINTS.items():
        for name, sampling in samplers.items():
            plain, constrained = [], []
            for _ in range(a.rounds):
                p, _n = ms_per_token(a.url, sampling, {}, a.tokens)
                c, n = ms_per_token(a.url, sampling, constraint, a.tokens)
                assert n == a.tokens, f"the constrained generation stopped at {n} tokens"
                plain.append(p)
                constrained.append(c)
            p, c = statistics.median(plain), statistics.median(constrained)
            print(f"{cname:22} {name:20} plain {p:6.1f} ms/token, constrained {c:6.1f} ms/token: {c / p:.3f}x "
                  f"(+{c - p:.1f} ms a token)")

if __name__ == "__main__":
    main()
