# Where a generation ends and what it may say, vLLM's controls (and llama.cpp's ignore_eos):
# ignore_eos, min_tokens, stop_token_ids, include_stop_str_in_output, allowed_token_ids,
# skip_special_tokens, and the stop_reason each choice reports
# (server/sched/sched_step.c, server/sched/text_stream.c, server/api/openai_request.c). The
# references: the same prompt's greedy reply without them, its tokens from /tokenize, and the
# end-of-generation tokens made certain with logit_bias.
import json

import pytest
import requests

PROMPT = "The capital of France is"


def post(server, path, body):
    return requests.post(server.url + path, json=body, timeout=300)


def complete(server, **body):
    r = post(server, "/v1/completions", {"prompt": PROMPT, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0], r.json()["usage"]


def stream_choice(server, **body):
    r = requests.post(server.url + "/v1/completions", json={"prompt": PROMPT, "temperature": 0, "stream": True, **body},
                      stream=True, timeout=300)
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: ") and line != b"data: [DONE]"]
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"]), chunks[-1]["choices"][0]


def token_id(server, text):
    ids = post(server, "/tokenize", {"prompt": text, "add_special": False}).json()["tokens"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


@pytest.fixture(scope="module")
def greedy(server):
    """The greedy reply of 12 tokens: its text, token ids and each token's text, checked to be
    the reply's own tokens (their texts add up to it)."""
    choice, usage = complete(server, max_tokens=12)
    assert usage["completion_tokens"] == 12 and choice["finish_reason"] == "length"
    ids = post(server, "/tokenize", {"prompt": choice["text"], "add_special": False}).json()["tokens"]
    texts = [post(server, "/detokenize", {"tokens": [t]}).json()["prompt"] for t in ids]
    assert "".join(texts) == choice["text"] and len(ids) == 12, (ids, texts)
    return choice["text"], ids, texts


@pytest.fixture(scope="module")
def eog(server):
    """The end-of-generation tokens of Gemma 3: <eos> and <end_of_turn>."""
    return [token_id(server, "<eos>"), token_id(server, "<end_of_turn>")]


def certain(ids):
    return {str(t): 100 for t in ids}


def test_ignore_eos(server, eog):
    choice, usage = complete(server, max_tokens=6, logit_bias=certain(eog))
    assert choice["finish_reason"] == "stop" and usage["completion_tokens"] == 0 and choice["stop_reason"] is None
    choice, usage = complete(server, max_tokens=6, logit_bias=certain(eog), ignore_eos=True, logprobs=0)
    assert choice["finish_reason"] == "length" and usage["completion_tokens"] == 6
    assert not set(choice["logprobs"]["tokens"]) & {"<eos>", "<end_of_turn>"}
    # Chat ends on <end_of_turn>; with ignore_eos it cannot.
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
                                              "temperature": 0, "logit_bias": certain(eog), "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == 5


def test_min_tokens(server, eog):
    for n in (1, 5):
        choice, usage = complete(server, max_tokens=12, logit_bias=certain(eog), min_tokens=n)
        assert usage["completion_tokens"] == n and choice["finish_reason"] == "stop", (n, choice)
    choice, usage = complete(server, max_tokens=12, logit_bias=certain(eog), min_tokens=0)
    assert usage["completion_tokens"] == 0


def first_fresh(ids, start):
    """The first index from start whose token did not occur before it."""
    return next(k for k in range(start, len(ids)) if ids[k] not in ids[:k])


def test_stop_token_ids(server, greedy):
    text, ids, texts = greedy
    k = first_fresh(ids, 2)
    choice, usage = complete(server, max_tokens=12, stop_token_ids=[ids[k]])
    assert choice["text"] == "".join(texts[:k]) and usage["completion_tokens"] == k
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == ids[k]
    choice, usage = complete(server, max_tokens=12, stop_token_ids=[ids[k], 5], include_stop_str_in_output=True)
    assert choice["text"] == "".join(texts[: k + 1]) and usage["completion_tokens"] == k + 1
    assert choice["stop_reason"] == ids[k]
    # Before min_tokens the stop token cannot be drawn: the reply goes past it.
    choice, usage = complete(server, max_tokens=12, stop_token_ids=[ids[k]], min_tokens=k + 2)
    assert usage["completion_tokens"] >= k + 2 and choice["text"][: len(text[:5])] == text[:5]
    streamed, last = stream_choice(server, max_tokens=12, stop_token_ids=[ids[k]])
    assert streamed == "".join(texts[:k]) and last["finish_reason"] == "stop" and last["stop_reason"] == ids[k]


def test_stop_string_reason_and_include(server, greedy):
    text, ids, texts = greedy
    k = first_fresh(ids, 2)
    word = texts[k].strip()
    assert word and text.find(word) == len("".join(texts[:k])) + texts[k].find(word)
    cut = text.find(word)
    choice, _ = complete(server, max_tokens=12, stop=[word])
    assert choice["text"] == text[:cut] and choice["finish_reason"] == "stop" and choice["stop_reason"] == word
    choice, _ = complete(server, max_tokens=12, stop=["no such text", word], include_stop_str_in_output=True)
    assert choice["text"] == text[: cut + len(word)] and choice["stop_reason"] == word
    streamed, last = stream_choice(server, max_tokens=12, stop=[word], include_stop_str_in_output=True)
    assert streamed == text[: cut + len(word)] and last["stop_reason"] == word
    # No stop: the reason is null, as for the length.
    choice, _ = complete(server, max_tokens=3)
    assert choice["stop_reason"] is None


def test_min_tokens_defers_stop_strings(server, greedy):
    """A stop string counts once it ends in the min_tokens-th token's text or later (vLLM's check
    starts at that token): an earlier occurrence goes out as text."""
    text, ids, texts = greedy
    ends = [len("".join(texts[: i + 1])) for i in range(len(texts))]
    # A stop string the reply holds at least twice: its first whole word that comes back.
    words = text.split()
    stop = next(" " + w for w in words if text.count(" " + w) >= 2)
    first_end = text.find(stop) + len(stop)
    m = next(i for i in range(len(ends)) if ends[i] >= first_end) + 2  # past the first occurrence's token
    later = text.find(stop, ends[m - 2])
    assert later >= 0
    choice, usage = complete(server, max_tokens=12, stop=[stop], min_tokens=m)
    assert choice["text"] == text[:later] and choice["stop_reason"] == stop, (stop, m, choice)
    choice, _ = complete(server, max_tokens=12, stop=[stop])
    assert choice["text"] == text[: text.find(stop)]


def test_allowed_token_ids(server, greedy):
    text, ids, texts = greedy
    allowed = [ids[0], ids[2], ids[0]]  # a repeat is harmless
    for temperature in (0, 1.5):
        choice, usage = complete(server, max_tokens=6, allowed_token_ids=allowed, temperature=temperature, seed=4,
                                 logprobs=5)
        lp = choice["logprobs"]
        assert usage["completion_tokens"] == 6 and set(lp["tokens"]) <= {texts[0], texts[2]}, lp
        # Only the two allowed tokens are alternatives: a masked token has no log-probability.
        for top in lp["top_logprobs"]:
            assert set(top) <= {texts[0], texts[2]} and all(isinstance(v, float) for v in top.values()), top
    # Chat's entries through the openai package's types (a null logprob would not parse).
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")
    r = client.chat.completions.create(model=client.models.list().data[0].id, max_tokens=3, temperature=0,
                                       messages=[{"role": "user", "content": "Hi"}], logprobs=True, top_logprobs=5,
                                       extra_body={"allowed_token_ids": [ids[0], ids[2]]})
    entries = r.choices[0].logprobs.content
    assert len(entries) == 3 and all(e.token in (texts[0], texts[2]) and len(e.top_logprobs) == 2 for e in entries)


def test_skip_special_tokens(server, eog):
    bos = token_id(server, "<bos>")
    for skip, want in ((True, ""), (False, "<bos>" * 3)):
        choice, usage = complete(server, max_tokens=3, allowed_token_ids=[bos] + eog, ignore_eos=True,
                                 skip_special_tokens=skip)
        assert usage["completion_tokens"] == 3 and choice["text"] == want, (skip, choice)
    r = post(server, "/v1/completions", {"prompt": PROMPT, "allowed_token_ids": eog, "ignore_eos": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text


@pytest.mark.parametrize("body,param", [
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"include_stop_str_in_output": "yes"}, "include_stop_str_in_output"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 1.5}, "min_tokens"),
    ({"min_tokens": 9, "max_tokens": 8}, "min_tokens"),
    ({"stop_token_ids": 5}, "stop_token_ids"),
    ({"stop_token_ids": [1, -2]}, "stop_token_ids"),
    ({"stop_token_ids": [1.5]}, "stop_token_ids"),
    ({"stop_token_ids": ["1"]}, "stop_token_ids"),
    ({"stop_token_ids": list(range(65))}, "stop_token_ids"),
    ({"stop_token_ids": [262144]}, "stop_token_ids"),
    ({"allowed_token_ids": []}, "allowed_token_ids"),
    ({"allowed_token_ids": 5}, "allowed_token_ids"),
    ({"allowed_token_ids": [3, "4"]}, "allowed_token_ids"),
    ({"allowed_token_ids": [262144, 3]}, "allowed_token_ids"),
    ({"skip_special_tokens": 0}, "skip_special_tokens"),
])
def test_refused(server, body, param):
    r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("field,on,off", [
    ("use_beam_search", True, False),
])
def test_vllm_fields_not_supported_are_refused(server, field, on, off):
    """vLLM's fields that would change the output and are not implemented: a 400 naming them, never
    silently ignored; their "off" values pass."""
    r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, field: on})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert r.json()["error"]["code"] == "unsupported_value"
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, field: on})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, field: off})
    assert r.status_code == 200, r.text


def test_truncate_prompt_tokens(server):
    """vLLM's truncate_prompt_tokens: only the prompt's last N tokens run (its BOS cut with the rest),
    the same reply as those tokens sent as the prompt, usage counting them; a longer N or -1 (as many
    as the context holds) leaves a short prompt whole; chat's rendered prompt is cut the same way;
    0, -2, fractions, strings and booleans are refused naming the field."""
    ids = post(server, "/tokenize", {"prompt": PROMPT}).json()["tokens"]
    assert len(ids) > 4
    cut, usage = complete(server, max_tokens=6, truncate_prompt_tokens=3)
    assert usage["prompt_tokens"] == 3
    ref = post(server, "/v1/completions", {"prompt": ids[-3:], "temperature": 0, "max_tokens": 6})
    assert ref.status_code == 200, ref.text
    assert cut["text"] == ref.json()["choices"][0]["text"]
    r = post(server, "/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 6, "n": 2,
                                         "truncate_prompt_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 3, r.text
    assert [c["text"] for c in r.json()["choices"]] == [cut["text"]] * 2
    whole, u = complete(server, max_tokens=6)
    assert u["prompt_tokens"] == len(ids)
    for n in (-1, len(ids), len(ids) + 5):
        same, u2 = complete(server, max_tokens=6, truncate_prompt_tokens=n)
        assert same["text"] == whole["text"] and u2["prompt_tokens"] == len(ids), n
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello there, how are you?"}],
                                              "max_tokens": 2, "truncate_prompt_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 2, r.text
    for bad in (0, -2, 1.5, "3", True):
        r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "truncate_prompt_tokens": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "truncate_prompt_tokens", (bad, r.text)


def test_null_means_not_given(server):
    choice, usage = complete(server, max_tokens=3, ignore_eos=None, min_tokens=None, stop_token_ids=None,
                             include_stop_str_in_output=None, allowed_token_ids=None, skip_special_tokens=None)
    assert usage["completion_tokens"] == 3


def test_return_tokens_as_token_ids(server):
    """vLLM's return_tokens_as_token_ids: logprobs name every token "token_id:N" (chat's bytes are
    that text's), N the id whose text the same greedy request without it shows; completions' top
    alternatives keyed so too, echo's prompt entries as well; a non-boolean is refused."""
    def detok(i):
        return post(server, "/detokenize", {"tokens": [i]}).json()["prompt"]

    plain, _ = complete(server, max_tokens=4, logprobs=2)
    ids, _ = complete(server, max_tokens=4, logprobs=2, return_tokens_as_token_ids=True)
    assert ids["text"] == plain["text"]
    toks = ids["logprobs"]["tokens"]
    assert len(toks) == 4 and all(t.startswith("token_id:") for t in toks)
    assert [detok(int(t[9:])) for t in toks] == plain["logprobs"]["tokens"]
    for top, plain_top in zip(ids["logprobs"]["top_logprobs"], plain["logprobs"]["top_logprobs"]):
        assert sorted(detok(int(k[9:])) for k in top) == sorted(plain_top)
    echo, _ = complete(server, max_tokens=1, logprobs=1, echo=True, return_tokens_as_token_ids=True)
    n_prompt = len(post(server, "/tokenize", {"prompt": PROMPT}).json()["tokens"])
    assert len(echo["logprobs"]["tokens"]) == n_prompt + 1
    assert all(t.startswith("token_id:") for t in echo["logprobs"]["tokens"])
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0, "logprobs": True,
            "top_logprobs": 2}
    chat_plain = post(server, "/v1/chat/completions", body).json()["choices"][0]["logprobs"]["content"]
    chat_ids = post(server, "/v1/chat/completions", {**body, "return_tokens_as_token_ids": True}).json()
    content = chat_ids["choices"][0]["logprobs"]["content"]
    assert len(content) == len(chat_plain)
    for e, p in zip(content, chat_plain):
        assert e["token"].startswith("token_id:") and e["bytes"] == list(e["token"].encode())
        assert detok(int(e["token"][9:])) == p["token"] and e["logprob"] == p["logprob"]
        assert all(a["token"].startswith("token_id:") for a in e["top_logprobs"])
    r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "return_tokens_as_token_ids": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "return_tokens_as_token_ids", r.text


def test_bad_words(server):
    """vLLM's bad_words: a word's token sequence is never generated (its last token masked after the
    ones before it), alone or with a space before it; a multi-token word leaves its first tokens
    free: the reply follows the greedy one up to the word's last token and turns there. Not a list of
    strings, too many, too long: refused naming the field; [] and null pass."""
    def ids_of(choice):
        return [int(t[9:]) for t in choice["logprobs"]["tokens"]]

    plain, _ = complete(server, max_tokens=10, logprobs=0, return_tokens_as_token_ids=True)
    reply = ids_of(plain)
    first = post(server, "/detokenize", {"tokens": reply[:1]}).json()["prompt"]
    banned, _ = complete(server, max_tokens=10, logprobs=0, return_tokens_as_token_ids=True, bad_words=[first])
    assert ids_of(banned)[0] != reply[0] and reply[0] not in ids_of(banned)
    pair_at = None
    for i in range(1, len(reply) - 1):
        word = post(server, "/detokenize", {"tokens": reply[i:i + 2]}).json()["prompt"]
        toks = post(server, "/tokenize", {"prompt": word, "add_special": False}).json()["tokens"]
        if toks == reply[i:i + 2] and word.startswith(" ") and len(word.strip().split()) >= 1:
            pair_at = i
            break
    assert pair_at is not None, reply
    turned, _ = complete(server, max_tokens=10, logprobs=0, return_tokens_as_token_ids=True, bad_words=[word])
    got = ids_of(turned)
    assert got[:pair_at + 1] == reply[:pair_at + 1] and got[pair_at + 1] != reply[pair_at + 1], (got, reply)
    for off in ([], None):
        r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "bad_words": off})
        assert r.status_code == 200, r.text
    for bad in ("Paris", [1], ["x"] * 65, ["x" * 257]):
        r = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "bad_words": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "bad_words", r.text
