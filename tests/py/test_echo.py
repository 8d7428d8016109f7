# The prompt sent back: OpenAI's echo on completions (the prompt's text and its tokens' logprobs,
# what evaluation harnesses such as lm-evaluation-harness read to score a text), max_tokens 0 with
# echo, vLLM's prompt_logprobs and vLLM's chat echo (server/api/prompt_echo.c,
# server/sched/prompt_score.c). The references: the tokenizer (/tokenize), the decode path's own
# logprobs for the same tokens, and the prompt's text.
import json
import math
import socket
import time

import pytest
import requests

from conftest import LONG_PROMPTS, Server, metric, wait_idle

# Greedy from this prompt, the model writes plain English words, so the tokens of prompt + reply
# are the prompt's tokens followed by the reply's (checked below, not assumed).
PROMPT = "The capital of France is"


def post(server, path, body):
    return requests.post(server.url + path, json=body, timeout=300)


def complete(server, **body):
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, path, body):
    r = requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=300)
    assert r.status_code == 200, r.text
    out = []
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def tokens_of(server, text, add_special=True):
    r = post(server, "/tokenize", {"prompt": text, "add_special": add_special})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def pieces(server, ids):
    return [post(server, "/detokenize", {"tokens": [t]}).json()["prompt"] for t in ids]


def check_entries(lp):
    """The legacy arrays agree: equal lengths, the first entry unscored, every other scored; a
    scored token's logprob is at most its best alternative's, and equal to it when it is one."""
    n = len(lp["tokens"])
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for i in range(1, n):
        v, top = lp["token_logprobs"][i], lp["top_logprobs"][i]
        assert v is not None and v <= 0 and top is not None, (i, lp)
        assert not top or v <= max(top.values()) + 1e-6, (i, v, top)
        if lp["tokens"][i] in top:
            assert abs(top[lp["tokens"][i]] - v) < 1e-6, (i, v, top)
    assert all(a <= b for a, b in zip(lp["text_offset"], lp["text_offset"][1:]))


def test_echo_scores_the_prompt_as_decoding_did(server):
    # The reply's own logprobs (the decode path, one token a step) against the same tokens scored
    # as a prompt (the prefill path, all rows of one chunk): the same model, two computations.
    gen = complete(server, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2)["choices"][0]
    reply = gen["text"]
    ids = tokens_of(server, PROMPT + reply)
    n_prompt = len(tokens_of(server, PROMPT))
    assert pieces(server, ids) == pieces(server, tokens_of(server, PROMPT)) + gen["logprobs"]["tokens"]

    r = complete(server, prompt=PROMPT + reply, max_tokens=0, echo=True, logprobs=1)
    ch = r["choices"][0]
    assert ch["text"] == PROMPT + reply and ch["finish_reason"] == "length"
    assert r["usage"]["prompt_tokens"] == len(ids) and r["usage"]["completion_tokens"] == 0
    lp = ch["logprobs"]
    assert lp["tokens"] == pieces(server, ids)  # "<bos>" first: the BOS a text prompt gets
    check_entries(lp)
    scored = lp["token_logprobs"][n_prompt:]
    for a, b in zip(scored, gen["logprobs"]["token_logprobs"]):
        assert abs(a - b) < 2e-2, (scored, gen["logprobs"]["token_logprobs"])
    # lm-evaluation-harness's is_greedy: the reply was greedy, so each of its tokens is its entry's best.
    for tok, top in zip(lp["tokens"][n_prompt:], lp["top_logprobs"][n_prompt:]):
        assert max(top, key=top.get) == tok, (tok, top)
    # Offsets point into the text: the BOS (not in it) and the first word at 0, then each token's text.
    for tok, off in zip(lp["tokens"][1:], lp["text_offset"][1:]):
        assert ch["text"][off:].startswith(tok), (tok, off)


def test_echo_with_a_reply_streams_and_offsets_count_characters(server):
    # Non-ASCII text: offsets in characters, as a client indexes the string it got.
    prompt = "Über den Wolken, café crème, naïve résumé:"
    whole = complete(server, prompt=prompt, max_tokens=4, temperature=0, echo=True, logprobs=0)["choices"][0]
    assert whole["text"].startswith(prompt)
    lp = whole["logprobs"]
    check_entries(lp)
    n = len(tokens_of(server, prompt))
    assert lp["text_offset"][n] == len(prompt)  # the reply's first token starts right after the prompt
    for tok, off in zip(lp["tokens"][1:], lp["text_offset"][1:]):
        if "\ufffd" not in tok:
            assert whole["text"][off:].startswith(tok), (tok, off, whole["text"])
    chunks = stream(server, "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0, "echo": True,
                                                "logprobs": 0})
    first = chunks[0]["choices"][0]
    assert first["text"] == prompt and first["logprobs"]["token_logprobs"][0] is None
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["text"]
    joined = [v for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
              for v in c["choices"][0]["logprobs"]["text_offset"]]
    assert joined == lp["text_offset"]
    vals = [v for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
            for v in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert vals[0] is None and all(abs(a - b) < 2e-2 for a, b in zip(vals[1:], lp["token_logprobs"][1:]))


def test_a_long_prompt_is_scored_whole_past_the_prefix_cache(server):
    # About 300 tokens: several scored chunks (a step returns at most 64 rows, and a scored token costs
    # three of the step's budget). The same prompt again is in the prefix cache, which may give a
    # scored prompt nothing: every entry is scored again, to the same values; a plain request
    # after it does take the cached blocks.
    text = " ".join(LONG_PROMPTS) * 2
    a = complete(server, prompt=text, max_tokens=0, echo=True, logprobs=1)
    b = complete(server, prompt=text, max_tokens=0, echo=True, logprobs=1)
    n = a["usage"]["prompt_tokens"]
    assert n > 250
    for r in (a, b):
        check_entries(r["choices"][0]["logprobs"])
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    va, vb = a["choices"][0]["logprobs"]["token_logprobs"], b["choices"][0]["logprobs"]["token_logprobs"]
    assert all(abs(x - y) < 2e-2 for x, y in zip(va[1:], vb[1:]))
    c = complete(server, prompt=text, max_tokens=1, temperature=0)
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_max_tokens_zero_needs_echo_and_token_prompts_echo_their_text(server):
    r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    ids = tokens_of(server, PROMPT)
    # A token prompt is used as given; its text is its tokens', <bos> as /detokenize writes it.
    r = complete(server, prompt=[ids, ids[1:]], max_tokens=0, echo=True, n=2)
    texts = [c["text"] for c in r["choices"]]
    assert texts == ["<bos>" + PROMPT] * 2 + [PROMPT] * 2, texts
    assert all(c["logprobs"] is None for c in r["choices"])
    # A batch of text prompts with n: each choice begins with its own prompt.
    r = complete(server, prompt=["One, two,", "Red, green,"], max_tokens=2, temperature=0, echo=True, n=2)
    for c in r["choices"]:
        assert c["text"].startswith(["One, two,", "Red, green,"][c["index"] // 2]), c


def test_vllm_prompt_logprobs(server):
    ids = tokens_of(server, PROMPT)
    r = complete(server, prompt=PROMPT, max_tokens=1, temperature=0, prompt_logprobs=2, echo=True, logprobs=0)
    ch = r["choices"][0]
    plp = ch["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for i in range(1, len(ids)):
        entry = plp[i]
        mine = entry[str(ids[i])]
        assert abs(mine["logprob"] - ch["logprobs"]["token_logprobs"][i]) < 1e-5
        # The prompt's token with its rank, and the two best (ranks 1 and 2), once each.
        ranks = sorted(e["rank"] for e in entry.values())
        assert ranks == sorted({1, 2, mine["rank"]}), entry
        by_rank = sorted(entry.values(), key=lambda e: e["rank"])
        assert all(a["logprob"] >= b["logprob"] for a, b in zip(by_rank, by_rank[1:])), entry
    # Not echoed: the completion's text alone, the prompt's entries beside it.
    r = complete(server, prompt=PROMPT, max_tokens=1, temperature=0, prompt_logprobs=0)
    assert not r["choices"][0]["text"].startswith(PROMPT) and len(r["choices"][0]["prompt_logprobs"]) == len(ids)
    # Chat: the response's field, the chat prompt's tokens.
    msgs = [{"role": "user", "content": "Hi"}]
    r = post(server, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "prompt_logprobs": 0}).json()
    chat_ids = post(server, "/tokenize", {"messages": msgs}).json()["tokens"]
    assert len(r["prompt_logprobs"]) == len(chat_ids) and r["prompt_logprobs"][0] is None
    assert all(str(t) in e for t, e in zip(chat_ids[1:], r["prompt_logprobs"][1:]))
    for bad in (-1, 21, 1.5, "2"):
        r = post(server, "/v1/completions", {"prompt": PROMPT, "prompt_logprobs": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_logprobs", (bad, r.text)


def test_chat_echo_continues_the_last_reply(server):
    msgs = [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi, I am"}]
    body = {"messages": msgs, "continue_final_message": True, "add_generation_prompt": False, "max_tokens": 4,
            "temperature": 0}
    plain = post(server, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    echoed = post(server, "/v1/chat/completions", {**body, "echo": True}).json()["choices"][0]["message"]["content"]
    assert echoed == "Hi, I am" + plain
    chunks = stream(server, "/v1/chat/completions", {**body, "echo": True})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0].get("role") == "assistant" and deltas[1] == {"content": "Hi, I am"}
    assert "".join(d.get("content") or "" for d in deltas) == echoed
    # The last message a user's: nothing to echo.
    one = {"messages": msgs[:1], "max_tokens": 2, "temperature": 0}
    assert (post(server, "/v1/chat/completions", {**one, "echo": True}).json()["choices"][0]["message"] ==
            post(server, "/v1/chat/completions", one).json()["choices"][0]["message"])
    r = post(server, "/v1/chat/completions", {"messages": msgs[:1], "echo": True,
                                              "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"
    # Streamed with prompt_logprobs: they ride the first chunk, the role's (vLLM's), then the echo,
    # then the reply; the entries are the whole response's.
    whole = post(server, "/v1/chat/completions", {**body, "echo": True, "prompt_logprobs": 1}).json()
    chunks = stream(server, "/v1/chat/completions", {**body, "echo": True, "prompt_logprobs": 1})
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert chunks[0]["prompt_logprobs"] == whole["prompt_logprobs"] and len(whole["prompt_logprobs"]) > 5
    assert not any("prompt_logprobs" in c for c in chunks[1:])
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert sum(1 for d in deltas if "role" in d) == 1 and deltas[1] == {"content": "Hi, I am"}
    assert "".join(d.get("content") or "" for d in deltas) == whole["choices"][0]["message"]["content"]


def test_openai_client_scores_a_continuation(client, model_id, server):
    # lm-evaluation-harness's loglikelihood request through the openai package: context +
    # continuation as one prompt, echo, logprobs 1, one token; the continuation's entries are
    # token_logprobs[ctxlen:-1] (its parse_logprobs).
    ctx, cont = "The capital of France is", " Paris"
    ctxlen = len(tokens_of(server, ctx))
    scores = {}
    for c in (" Paris", " London"):
        r = client.completions.create(model=model_id, prompt=ctx + c, max_tokens=1, temperature=0, logprobs=1,
                                      echo=True)
        lp = r.choices[0].logprobs
        scores[c] = sum(lp.token_logprobs[ctxlen:-1])
        assert len(lp.token_logprobs) == len(tokens_of(server, ctx + c)) + 1
        assert all(math.isfinite(v) for v in lp.token_logprobs[1:])
    assert scores[cont] > scores[" London"], scores


def test_client_gone_mid_scoring(server):
    # A client that leaves while its long prompt is being scored (a few of its chunks in, its entries
    # held by the engine thread): the request ends as an abort, its entries and blocks go (the ASan
    # daemon pass checks the memory), and the server answers the next request.
    aborted = 'finished_reason="abort"'
    before = metric(server, "request_success_total", aborted)
    body = json.dumps({"prompt": " ".join(LONG_PROMPTS) * 2, "max_tokens": 0, "echo": True, "logprobs": 5}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    deadline = time.time() + 60
    while metric(server, "num_requests_running") == 0 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a chunk or two scored (the whole prompt takes some seconds)
    s.close()
    wait_idle(server, timeout=60)
    assert metric(server, "request_success_total", aborted) == before + 1
    assert metric(server, "kv_cache_used_bytes") == 0
    r = complete(server, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    assert r["choices"][0]["text"] == PROMPT


def test_tokenizer_info_serves_a_remote_tokenizer(server):
    # What lm-evaluation-harness's remote tokenizer reads (vLLM's GET /tokenizer_info): the special
    # tokens' text, which /tokenize turns back into their ids without adding a BOS.
    info = requests.get(server.url + "/tokenizer_info", timeout=30).json()
    models = requests.get(server.url + "/v1/models", timeout=30).json()["data"][0]
    assert info["model_max_length"] == models["max_model_len"] and info["vocab_size"] > 1000
    # (the default model, a base model, carries no chat template: null)
    assert info["add_bos_token"] is True and info["pad_token"] is None
    assert info["chat_template"] is None or isinstance(info["chat_template"], str)
    bos = post(server, "/tokenize", {"prompt": info["bos_token"], "add_special_tokens": False}).json()["tokens"]
    eos = post(server, "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False}).json()["tokens"]
    assert len(bos) == 1 and bos == tokens_of(server, PROMPT)[:1]
    assert len(eos) == 1 and eos != bos
    assert pieces(server, bos + eos) == [info["bos_token"], info["eos_token"]]


def test_scored_entries_are_bounded():
    # prompt tokens x (alternatives + 1) x choices <= 2^19 (SCHED_MAX_PROMPT_SCORES): past it, a 400
    # before any step, and the server goes on; at it, the request runs (max_tokens 0: no reply).
    s = Server("--kv", "f16", "--ctx", "2048", "--max-batch", "16")
    try:
        text = " ".join(LONG_PROMPTS) * 12
        n = len(tokens_of(s, text))
        assert 1600 < n < 2000
        over = 2 ** 19 // (21 * n) + 1  # choices that take it past the bound with 20 alternatives
        r = post(s, "/v1/completions", {"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 20, "n": over})
        assert r.status_code == 400 and "exceeds 524288 entries" in r.json()["error"]["message"], r.text
        r = post(s, "/v1/completions", {"prompt": text, "max_tokens": 0, "echo": True, "prompt_logprobs": 20, "n": over})
        assert r.status_code == 400, r.text
        r = post(s, "/v1/completions", {"prompt": text[:200], "max_tokens": 0, "echo": True, "logprobs": 20, "n": over})
        assert r.status_code == 200 and len(r.json()["choices"]) == over, r.text
    finally:
        assert s.stop() == 0, s.log()
