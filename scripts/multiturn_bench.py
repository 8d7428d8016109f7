#!/usr/bin/env python3
# Benchmark (not a test): a multi-turn chat load against two OpenAI-compatible servers at once,
# e.g. `wushkv serve` with and without --no-prefix-cache, or wushkv beside llama-server. C
# conversations run side by side, each T turns that resend the whole history (as chat clients
# do), at temperature 0 with max_tokens M. Turn t of every conversation goes to one server, then
# the same turn to the other (which goes first alternates turn by turn), so both see the same
# machine load; each conversation keeps the history of its own server's answers. Prints, per
# server and turn, the mean time to first token, mean prompt and cached tokens
# (usage.prompt_tokens_details.cached_tokens, where the server reports it), and for the whole
# run output tokens per second of the time spent on that server; last, the ratios B / A.
#
#   python3 scripts/multiturn_bench.py --url http://127.0.0.1:8080 --peer-url http://127.0.0.1:8081 \
#       [--conversations 8] [--turns 6] [--max-tokens 32] [--model ID]
#
# Standard library only.
import argparse
import concurrent.futures as cf
import json
import statistics
import sys
import time
import urllib.request

OPENINGS = [
    "Here is a list of the planets of the solar system in order from the sun: Mercury, Venus, Earth, Mars, Jupiter, "
    "Saturn, Uranus and Neptune. Tell me about the planet number {}.",
    "A recipe for bread needs flour, water, yeast and salt, mixed, kneaded for ten minutes, left to rise for an hour "
    "and baked for forty minutes. What is step {} of it?",
    "The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday. Which day is number "
    "{} of the week?",
    "In a small village by the sea there lived an old fisherman with his {} sons, who went out every morning before "
    "dawn. Continue the story.",
]
FOLLOW_UPS = ["Tell me more.", "Why is that?", "Give one more detail.", "Say it in other words.", "And then?",
              "Summarise it in one sentence.", "What else should I know?", "Is that all?"]


def post_stream(url, model, messages, max_tokens):
    """One streamed chat completion: (ttft seconds, text, usage dict)."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, text, usage = None, [], {}
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(piece)
    return (ttft if ttft is not None else time.monotonic() - t0), "".join(text), usage


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True, help="server A")
    ap.add_argument("--peer-url", required=True, help="server B")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default="", help="model id to send (default: none; both servers serve one model)")
    a = ap.parse_args()
    if a.conversations < 1 or a.turns < 1 or a.max_tokens < 1:
        sys.exit("multiturn_bench: --conversations, --turns and --max-tokens must be >= 1")
    urls = {"A": a.url.rstrip("/"), "B": a.peer_url.rstrip("/")}
    hist = {s: [[] for _ in range(a.conversations)] for s in urls}
    stats = {s: {"ttft": [[] for _ in range(a.turns)], "prompt": [[] for _ in range(a.turns)],
                 "cached": [[] for _ in range(a.turns)], "out": 0, "busy": 0.0} for s in urls}
    for t in range(a.turns):
        order = ["A", "B"] if t % 2 == 0 else ["B", "A"]
        for s in order:
            for c in range(a.conversations):
                text = OPENINGS[c % len(OPENINGS)].format(c + 1) if t == 0 else FOLLOW_UPS[(t + c) % len(FOLLOW_UPS)]
                hist[s][c].append({"role": "user", "content": text})
            t0 = time.monotonic()
            with cf.ThreadPoolExecutor(a.conversations) as ex:
                res = list(ex.map(lambda c: post_stream(urls[s], a.model, hist[s][c], a.max_tokens),
                                  range(a.conversations)))
            stats[s]["busy"] += time.monotonic() - t0
            for c, (ttft, text, usage) in enumerate(res):
                hist[s][c].append({"role": "assistant", "content": text})
                stats[s]["ttft"][t].append(ttft)
                stats[s]["prompt"][t].append(usage.get("prompt_tokens", 0))
                stats[s]["cached"][t].append((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
                stats[s]["out"] += usage.get("completion_tokens", 0)
    print(f"{a.conversations} conversations x {a.turns} turns, max_tokens {a.max_tokens}; A = {urls['A']}, "
          f"B = {urls['B']}")
    print("| turn | A mean TTFT (s) | A prompt / cached tokens | B mean TTFT (s) | B prompt / cached tokens | "
          "TTFT B / A |")
    print("|---|---|---|---|---|---|")
    for t in range(a.turns):
        m = {s: statistics.mean(stats[s]["ttft"][t]) for s in urls}
        pc = {s: f"{statistics.mean(stats[s]['prompt'][t]):.0f} / {statistics.mean(stats[s]['cached'][t]):.0f}"
              for s in urls}
        print(f"| {t + 1} | {m['A']:.2f} | {pc['A']} | {m['B']:.2f} | {pc['B']} | {m['B'] / m['A']:.2f} |")
    tput = {s: stats[s]["out"] / stats[s]["busy"] for s in urls}
    print(f"output tokens/s: A {tput['A']:.2f}, B {tput['B']:.2f} (B / A {tput['B'] / tput['A']:.2f}); "
          f"output tokens A {stats['A']['out']}, B {stats['B']['out']}")


if __name__ == "__main__":
    main()
