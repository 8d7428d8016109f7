#!/usr/bin/env python3
# Structured output against a peer on the same GGUF: the same prompt and the same GBNF grammar,
# greedy, through `wushkv serve` (/v1/completions, field "grammar") and llama-server (/completion,
# field "grammar"). With the same logits, grammar-constrained greedy decoding has one answer, so
# the texts must be equal, and each must be a sentence of the grammar. The grammars are our own
# small ones plus, with --grammars DIR, the example grammars llama.cpp ships (its grammars/
# folder: JSON, arithmetic, chess moves, lists, Japanese, English), each with a prompt that suits
# it. Then JSON Schemas through each server's own converter (ours: response_format json_schema;
# llama-server: json_schema): the texts may differ in white space, and both must validate (the
# jsonschema package). Prints a line per case (for a difference, where the texts part and our top
# alternatives there: logits that differ a little between engines can part greedy choices at a near
# tie); exits 1 on any difference or invalid text.
#
#   wushkv serve --kv f16 --port 8080 &
#   llama-server -m MODEL.gguf --port 8081 -c 4096 &
#   python3 scripts/grammar_peer_check.py http://127.0.0.1:8080 http://127.0.0.1:8081 [--grammars DIR]
#
# (--kv f16: the peer's cache is f16, so the logits agree to rounding; the 2-bit default's differ
# a little and greedy choices may part on a near tie.)
import argparse
import json
import os
import sys

import jsonschema
import requests

OWN = [
    ("The capital of France is", 'root ::= " " [A-Z] [a-z]+ "."'),
    ("Three colours:", 'root ::= (" " [a-z]+ ","){2} " " [a-z]+ "."'),
    ("Is the sky green? Answer:", 'root ::= " yes" | " no"'),
    ("My phone number is", 'root ::= " " [0-9]{3} "-" [0-9]{3} "-" [0-9]{4}'),
    ("A date:", 'root ::= " " [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" [0-3] [0-9]'),
    ("Caf\u00e9 menu in French:", 'root ::= (" " [a-z\u00e0-\u00ff]+){3,6} "."'),
    ("Emoji for happy:", 'root ::= " " [\U0001F600-\U0001F64F]{1,3}'),
    ("A list:\n", 'root ::= ("- " [^\\n]{1,30} "\\n"){2,4}'),
]
# llama.cpp's grammars/ files and a prompt each (files not found are skipped, and said so)
THEIRS = {
    "json.gbnf": "A user record in JSON: ",
    "json_arr.gbnf": "A list of users in JSON: ",
    "arithmetic.gbnf": "A sum: ",
    "chess.gbnf": "The first moves of the game: ",
    "list.gbnf": "Groceries:\n",
    "japanese.gbnf": "\u65e5\u672c\u8a9e\u306e\u6587: ",
    "english.gbnf": "A sentence: ",
}
SCHEMAS = [
    ("Describe a person as JSON.",
     {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                       "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                       "role": {"enum": ["admin", "user", "guest"]}},
      "required": ["name", "age", "role"], "additionalProperties": False}),
    ("Three numbers as JSON:", {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}),
]


def ours_text(url, prompt, max_tokens, **constraint):
    r = requests.post(url + "/v1/completions", timeout=600, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **constraint})
    r.raise_for_status()
    return r.json()["choices"][0]["text"]


def peer_text(url, prompt, max_tokens, **constraint):
    r = requests.post(url + "/completion", timeout=600, json={
        "prompt": prompt, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False, **constraint})
    r.raise_for_status()
    return r.json()["content"]


def top_at(tokens, k):
    """The (token, top alternatives) pair whose text covers character k of the joined tokens."""
    at = 0
    for token, top in tokens:
        if at + len(token) > k:
            return token, top
        at += len(token)
    return None, []


def where_they_part(ours, peer, prompt, max_tokens, grammar, mine, theirs):
    """Each engine's token at the first character where the texts differ, with its top alternatives
    there (log-probabilities before the grammar's mask): a near tie shows as close numbers."""
    k = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
    r = requests.post(ours + "/v1/completions", timeout=600, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "grammar": grammar, "logprobs": 5}).json()
    lp = r["choices"][0]["logprobs"]
    our_tok, our_top = top_at([(t, list(top.items())) for t, top in zip(lp["tokens"], lp["top_logprobs"])], k)
    p = requests.post(peer + "/completion", timeout=600, json={
        "prompt": prompt, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False, "grammar": grammar,
        "n_probs": 5}).json()
    peer_tok, peer_top = top_at([(c["token"], [(x["token"], x["logprob"]) for x in c.get("top_logprobs", [])])
                                 for c in p.get("completion_probabilities", [])], k)
    show = lambda top: ", ".join(f"{t!r} {v:.3f}" for t, v in top)
    return (f"parted at character {k}: ours took {our_tok!r}, our top 5: {show(our_top)}; "
            f"the peer took {peer_tok!r}, its top 5: {show(peer_top)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("peer")
    ap.add_argument("--grammars", help="llama.cpp's grammars/ folder")
    ap.add_argument("--max-tokens", type=int, default=48)
    a = ap.parse_args()
    cases = [(f"own {i}", p, g) for i, (p, g) in enumerate(OWN)]
    for name, prompt in THEIRS.items():
        path = os.path.join(a.grammars, name) if a.grammars else None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                cases.append((name, prompt, f.read()))
        elif a.grammars:
            print(f"skip {name}: not in {a.grammars}")
    bad = 0
    for name, prompt, grammar in cases:
        mine = ours_text(a.ours, prompt, a.max_tokens, grammar=grammar)
        theirs = peer_text(a.peer, prompt, a.max_tokens, grammar=grammar)
        same = mine == theirs
        bad += not same
        print(f"{'same' if same else 'DIFF'}  {name:16} {mine!r}" + ("" if same else f"\n      {'peer':16} {theirs!r}"))
        if not same:
            print("      " + where_they_part(a.ours, a.peer, prompt, a.max_tokens, grammar, mine, theirs))
    for i, (prompt, schema) in enumerate(SCHEMAS):
        mine = ours_text(a.ours, prompt, 160, response_format={"type": "json_schema",
                                                                "json_schema": {"name": "s", "schema": schema}})
        theirs = peer_text(a.peer, prompt, 160, json_schema=schema)
        verdicts = []
        for who, text in (("ours", mine), ("peer", theirs)):
            try:
                jsonschema.validate(json.loads(text), schema)
                verdicts.append(f"{who} valid")
            except (ValueError, jsonschema.ValidationError) as e:
                verdicts.append(f"{who} INVALID ({type(e).__name__})")
                bad += who == "ours"  # the peer's own failures are reported, not ours to fix
        print(f"schema {i}: {', '.join(verdicts)}; same text: {mine == theirs}\n      ours {mine!r}\n      peer {theirs!r}")
    print(f"{len(cases)} grammars, {len(SCHEMAS)} schemas, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
