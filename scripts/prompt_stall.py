#!/usr/bin/env python3
"""Measures whether a huge prompt holds up a small request (issue 14, item 2): the latency of a
1-token completion alone, then while a 190 KB prompt with n=16 is being refused. Usage:
python3 scripts/prompt_stall.py http://127.0.0.1:8080 against `wushkv serve --kv f16` (the f16
default of the time docs/reliability.md's figure was measured at; context 4096, room for 16 choices). Not a test: it prints the figures; the test with a bound is
tests/py/test_bad_input.py::test_small_request_not_stalled_by_a_huge_prompt."""
import sys
import threading
import time

import requests
U=sys.argv[1]
big = ("The quick brown fox jumps over the lazy dog. " * 20000)[:190000]
def small():
    t=time.time(); r=requests.post(U+"/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "temperature":0}, timeout=300); return round(time.time()-t,2)
print("small alone", small(), small())
res={}
def bigreq():
    t=time.time(); r=requests.post(U+"/v1/completions", json={"prompt": big, "n": 16, "max_tokens": 1}, timeout=300); res["big"]=(r.status_code, round(time.time()-t,2))
th=threading.Thread(target=bigreq); th.start(); time.sleep(0.1)
print("small during big", small())
th.join(); print("big", res)
