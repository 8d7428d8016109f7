# Structured output through the official `openai` package and raw HTTP: every field a client of
# OpenAI, vLLM or llama.cpp uses to constrain the output (response_format json_object / json_schema,
# guided_json / guided_regex / guided_choice / guided_grammar, structured_outputs, grammar,
# json_schema, the Responses API's text.format) gives text that an independent checker accepts:
# the `jsonschema` package for schemas, Python's json and re modules, membership for choices. Greedy
# and sampled, streamed and whole, n > 1; the constraint holds even where the model, a small base
# model, would write something else. Bad constraints are 400s naming the field.
import json
import re

import jsonschema
import pytest
import requests

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "active"],
    "additionalProperties": False,
}
TREE = {
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v", "kids"], "additionalProperties": False}},
    "$ref": "#/$defs/node",
}
CHOICE = {"anyOf": [{"type": "null"}, {"type": "number"}, {"const": "none"},
                    {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}]}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


def post(server, path, body):
    return requests.post(server.url + path, json=body, timeout=120)


def check_json(text, schema, finish):
    """The whole text is JSON that validates, when the model was let finish."""
    assert finish == "stop", f"cut at the token limit: {text!r}"
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("schema", [PERSON, TREE, CHOICE], ids=["person", "tree", "choice"])
def test_chat_json_schema_greedy(client, model_id, schema):
    r = client.chat.completions.create(model=model_id, messages=ASK, temperature=0, max_tokens=160,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema, "strict": True}})
    check_json(r.choices[0].message.content, schema, r.choices[0].finish_reason)


@pytest.mark.parametrize("sampling", [
    {"top_p": 1.0},  # the server's top_k 40: the best tokens checked one by one
    {"top_p": 1.0, "extra_body": {"top_k": -1, "min_p": 0.0}},  # nothing truncated: draws checked
    {"top_p": 0.9, "extra_body": {"top_k": -1, "min_p": 0.0}},  # top-p alone: the whole row masked
], ids=["top_k", "untruncated", "top_p"])
def test_sampled_choices_all_validate(client, model_id, sampling):
    # Sampling at temperature 1 wanders far from what greedy writes; each of the n choices holds,
    # whichever way the sampler meets the grammar.
    extra = {"guided_json": PERSON, **sampling.get("extra_body", {})}
    r = client.chat.completions.create(model=model_id, messages=ASK, temperature=1.0, top_p=sampling["top_p"], n=3,
                                       seed=5, max_tokens=160, extra_body=extra)
    texts = [check_json(c.message.content, PERSON, c.finish_reason) for c in r.choices]
    assert len(texts) == 3


def test_json_object_and_the_unconstrained_answer_differ(client, model_id):
    plain = client.completions.create(model=model_id, prompt="Here is a cat:", max_tokens=24, temperature=0)
    r = client.completions.create(model=model_id, prompt="Here is a cat:", max_tokens=120, temperature=0,
                                  extra_body={"response_format": {"type": "json_object"}})
    assert not plain.choices[0].text.lstrip().startswith("{")  # the model alone does not write JSON here
    text, finish = r.choices[0].text, r.choices[0].finish_reason
    if finish == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # the base model may fill a string to the limit: then the text is still a prefix of an object
        assert finish == "length" and text.lstrip().startswith("{")


def test_vllm_and_llama_cpp_fields(server):
    prompt = "The date today is"
    cases = [
        ({"guided_regex": r" \d{4}-\d{2}-\d{2}"}, lambda t: re.fullmatch(r" \d{4}-\d{2}-\d{2}", t)),
        ({"structured_outputs": {"regex": r"[A-Z][a-z]{2,8}day"}}, lambda t: re.fullmatch(r"[A-Z][a-z]{2,8}day", t)),
        ({"guided_choice": ["Monday", "a \"quoted\" day", "late\nnight"]},
         lambda t: t in ("Monday", "a \"quoted\" day", "late\nnight")),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
        ({"guided_grammar": 'root ::= " " month " " [1-9] [0-9]?\nmonth ::= "May" | "June"'},
         lambda t: re.fullmatch(r" (May|June) [1-9][0-9]?", t)),
        ({"grammar": 'root ::= [0-9]{1,3} ("." [0-9]{1,3}){3}'}, lambda t: re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", t)),
        ({"json_schema": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}},
         lambda t: isinstance(json.loads(t), list) and len(json.loads(t)) == 2),
    ]
    for extra, ok in cases:
        for temperature in (0, 1.0):
            body = {"prompt": prompt, "max_tokens": 40, "temperature": temperature, "seed": 3, **extra}
            r = post(server, "/v1/completions", body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] == "stop", (extra, choice)
            assert ok(choice["text"]), (extra, choice["text"])


def test_stream_adds_up_to_valid_json(client, model_id):
    stream = client.chat.completions.create(model=model_id, messages=ASK, temperature=0, max_tokens=160, stream=True,
                                            response_format={"type": "json_schema",
                                                             "json_schema": {"name": "p", "schema": PERSON}})
    parts, finish = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    check_json("".join(parts), PERSON, finish)


def test_finished_grammar_stops_and_length_cuts(server):
    # Once nothing may follow, the request ends ("stop") without waiting for an end token.
    r = post(server, "/v1/completions", {"prompt": "Answer:", "max_tokens": 30, "temperature": 0,
                                         "grammar": 'root ::= "yes" | "no"'}).json()
    assert r["choices"][0]["text"] in ("yes", "no") and r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] <= 2
    # max_tokens before the grammar is done: "length", the text a prefix of a sentence
    r = post(server, "/v1/completions", {"prompt": "Count:", "max_tokens": 3, "temperature": 0,
                                         "grammar": 'root ::= ("one " | "two " | "three "){10}'}).json()
    assert r["choices"][0]["finish_reason"] == "length"
    assert re.fullmatch(r"((one|two|three) ?)*", r["choices"][0]["text"])


def test_logprobs_under_a_grammar(client, model_id):
    r = client.completions.create(model=model_id, prompt="Pick:", max_tokens=4, temperature=0, logprobs=3,
                                  extra_body={"guided_choice": ["alpha", "beta"]})
    c = r.choices[0]
    assert c.text in ("alpha", "beta")
    lp = c.logprobs
    assert "".join(lp.tokens) == c.text
    # the model's own probabilities (before the mask), so finite and at most 0
    assert all(x <= 0 and x > -1e9 for x in lp.token_logprobs)


def test_responses_text_format(client, model_id):
    r = client.responses.create(model=model_id, input="Describe a person as JSON.", temperature=0,
                                max_output_tokens=160,
                                text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                                                 "strict": True}})
    assert r.status == "completed", r.output_text
    jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema" and r.text.format.name == "person"
    r = client.responses.create(model=model_id, input="A JSON object:", temperature=0, max_output_tokens=160,
                                text={"format": {"type": "json_object"}})
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)


@pytest.mark.parametrize("path,body,param,words", [
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= foo"}, "grammar", "never defined"),
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= \"a\"\nb ::= b \"x\""}, "grammar", "left-recursive"),
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= \"a\u0000\""}, "grammar", "NUL"),
    ("/v1/completions", {"prompt": "x", "grammar": 5}, "grammar", "string"),
    ("/v1/completions", {"prompt": "x", "guided_grammar": "root ::= [a-"}, "guided_grammar", "unterminated"),
    ("/v1/completions", {"prompt": "x", "guided_regex": "(a"}, "guided_regex", None),
    ("/v1/completions", {"prompt": "x", "guided_regex": "(a)\\1"}, "guided_regex", None),
    ("/v1/completions", {"prompt": "x", "guided_choice": []}, "guided_choice", "non-empty"),
    ("/v1/completions", {"prompt": "x", "guided_choice": ["a", 1]}, "guided_choice", "strings"),
    ("/v1/completions", {"prompt": "x", "guided_json": "{not json"}, "guided_json", None),
    ("/v1/completions", {"prompt": "x", "guided_json": {"type": "strnig"}}, "guided_json", None),
    ("/v1/completions", {"prompt": "x", "response_format": {"type": "xml"}}, "response_format", None),
    ("/v1/completions", {"prompt": "x", "response_format": {"type": "json_schema"}}, "response_format", None),
    ("/v1/completions", {"prompt": "x", "response_format": "json"}, "response_format", None),
    ("/v1/completions", {"prompt": "x", "guided_regex": "a", "grammar": "root ::= \"a\""}, "grammar", "both"),
    ("/v1/completions", {"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs",
     "both"),
    ("/v1/completions", {"prompt": "x", "structured_outputs": {"structural_tag": "{}"}}, "structured_outputs", None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_schema", "json_schema": {"schema": {
                                  "type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}}}}},
     "response_format", "format"),
    ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format", "schema"),
    ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                                                          "schema": {"type": "bogus"}}}}, "text.format", None),
])
def test_bad_constraints(server, path, body, param, words):
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    if words:
        assert words in err["message"], err


def test_huge_constraints_are_refused_quickly(server):
    # Sizes a hostile client can send within the body limit: refused by the limits, not slowly
    # worked through on the thread that serves every connection.
    many_keys = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(3000)}}
    r = post(server, "/v1/completions", {"prompt": "x", "guided_json": many_keys})
    assert r.status_code == 400 and "2048" in r.json()["error"]["message"], r.text
    rules = "root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1} | "b"\n' for i in range(20000)) + 'r20000 ::= "c"\n'
    r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2, "temperature": 0, "grammar": rules})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("b", "ab", "aa"), r.text
    r = post(server, "/v1/completions", {"prompt": "x", "grammar": "root ::= " + ' "abcdefghijklmnopqrstuvwxyz"' * 10000})
    assert r.status_code == 400 and "more than 200000 elements" in r.json()["error"]["message"], r.text


def test_null_and_text_ask_for_nothing(server):
    for extra in ({"response_format": {"type": "text"}}, {"guided_json": None, "grammar": None},
                  {"structured_outputs": {}}, {"guided_decoding_backend": "xgrammar"}):
        r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 1, **extra})
        assert r.status_code == 200, (extra, r.text)


def test_costly_grammars_are_bounded(server):
    # Grammars whose parse would cost seconds a token on the engine thread, which every running
    # request waits on: one whose start alone passes the matcher's limits is a 400; a choice of 3000
    # words, masked whole (top_p), is cheap because stacks with the same next character are walked
    # together; one that would check every token against 4000 different characters at every step
    # ends with an error naming the limits. A stream running beside them ends normally.
    chain = "root ::= r0\n" + "".join(f'r{i} ::= "x" | r{i + 1} "z"\n' for i in range(3000)) + 'r3000 ::= "y"\n'
    r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2, "grammar": chain})
    assert r.status_code == 400 and "too ambiguous where it starts" in r.json()["error"]["message"], r.text

    beside = {}

    def stream():
        with requests.post(server.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 40,
                                                                 "temperature": 0, "stream": True},
                           stream=True, timeout=300) as s:
            finishes = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in s.iter_lines()
                        if line.startswith(b"data: {")]
            beside["finish"] = [f for f in finishes if f]

    import threading
    t = threading.Thread(target=stream)
    t.start()
    words = [f"{a}{b}{i}" for i, (a, b) in enumerate(zip("abcdefghij" * 300, "klmnopqrst" * 300))]
    r = post(server, "/v1/completions", {"prompt": "Pick one:", "max_tokens": 8, "n": 4, "temperature": 1,
                                         "top_p": 0.9, "seed": 3, "guided_choice": words})
    assert r.status_code == 200, r.text
    assert all(c["text"] in words and c["finish_reason"] == "stop" for c in r.json()["choices"]), r.text
    wide = "root ::= " + " | ".join(f"w{i}" for i in range(4000)) + "\n" + \
        "".join(f"w{i} ::= [a-z] [\\u{0x100 + i:04X}]\n" for i in range(4000))
    r = post(server, "/v1/completions", {"prompt": "x", "max_tokens": 2, "temperature": 1, "top_p": 0.9,
                                         "grammar": wide})
    assert r.status_code == 500 and "too costly" in r.json()["error"]["message"], r.text
    t.join()
    assert beside.get("finish") == ["length"], beside
