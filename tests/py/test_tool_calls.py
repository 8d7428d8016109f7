# Tool calling on chat completions through the official `openai` package and raw HTTP: tools,
# tool_choice (auto, required, none, a named function), parallel_tool_calls, past calls and their
# results in the conversation, streamed and whole. The reply is held by a grammar to the generic
# format, so every call's arguments validate against its tool's parameters (checked with the
# `jsonschema` package) even from this small base model; the conversation the model reads is
# checked through /tokenize + /detokenize. Malformed tools and choices are 400s naming the field.
import json
import re
import time

import jsonschema
import pytest
import requests

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                        "b": {"type": "integer", "minimum": 0, "maximum": 999}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": ADD}}]
PARAMS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ID = re.compile(r"^call_[0-9a-f]{24}$")


def post(server, body):
    return requests.post(server.url + "/v1/chat/completions", json=body, timeout=120)


def check_calls(calls, names=PARAMS):
    assert calls, "no tool calls"
    for c in calls:
        assert c.type == "function" and ID.match(c.id), c
        assert c.function.name in names, c
        jsonschema.validate(json.loads(c.function.arguments), names[c.function.name])
    assert len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize("choice,names", [
    ("required", PARAMS),
    ({"type": "function", "function": {"name": "add"}}, {"add": ADD}),  # not what the question calls for
    ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather": WEATHER}),  # the first of two
], ids=["required", "named-add", "named-first"])
def test_a_call_is_made_and_validates(client, model_id, choice, names):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, max_tokens=80, temperature=0, n=2)
    for ch in r.choices:
        assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
        assert len(ch.message.tool_calls) == 1
        check_calls(ch.message.tool_calls, names)


def test_sampled_parallel_calls_validate(client, model_id):
    # Any number of calls may come; cut by max_tokens, the reply is the calls it finished, or its
    # raw text when it finished none.
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=120, temperature=1, seed=7, n=3)
    for ch in r.choices:
        if ch.message.tool_calls:
            assert ch.finish_reason in ("tool_calls", "length") and ch.message.content is None, ch
            check_calls(ch.message.tool_calls)
        else:
            assert ch.finish_reason == "length" and ch.message.content.lstrip().startswith("{"), ch


BIG = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}


def integers_in(value):
    if isinstance(value, dict):
        return [x for v in value.values() for x in integers_in(v)]
    return [value]


def test_a_cut_reply_keeps_its_whole_calls(client, model_id):
    # Greedy, with parallel calls allowed, this base model calls until max_tokens stops it: the
    # calls it finished come back (finish "length"), their arguments as the model wrote them, so an
    # unbounded integer stays an integer (printed through a double, 1000000000000000 was 1e+15).
    # Streamed, each call comes in a chunk of its own as soon as it is whole.
    tools = [TOOLS[0], {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": BIG}}]
    body = dict(model=model_id, messages=[{"role": "user", "content": "What is the weather in Paris and in Rome?"}],
                tools=tools, tool_choice="required", max_tokens=120, temperature=0)
    whole = client.chat.completions.create(**body).choices[0]
    assert whole.finish_reason == "length" and whole.message.content is None, whole
    calls = whole.message.tool_calls
    assert len(calls) >= 2, whole
    check_calls(calls, {"get_weather": WEATHER, "add": BIG})
    for c in calls:
        if c.function.name == "add":
            args = json.loads(c.function.arguments)
            jsonschema.validate(args, BIG)
            assert all(type(v) is int for v in integers_in(args)) and "e" not in c.function.arguments.lower(), c
    chunks = list(client.chat.completions.create(stream=True, **body))
    with_calls = [ch.choices[0].delta.tool_calls for ch in chunks if ch.choices and ch.choices[0].delta.tool_calls]
    assert [len(d) for d in with_calls] == [1] * len(calls), with_calls
    for i, (d, c) in enumerate(zip(with_calls, calls)):
        assert d[0].index == i and ID.match(d[0].id) and d[0].type == "function"
        assert (d[0].function.name, d[0].function.arguments) == (c.function.name, c.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "length" and not chunks[-1].choices[0].delta.tool_calls


# As pydantic writes a model with a nested one (the OpenAI Agents SDK, LangChain): "$ref" into the
# tool's own "$defs", which must resolve there, not in the reply's schema around it; and a
# recursive one through "#".
BOOKING = {"type": "object", "additionalProperties": False, "required": ["guest", "nights"],
           "properties": {"guest": {"$ref": "#/$defs/Person"}, "nights": {"type": "integer", "minimum": 1, "maximum": 9}},
           "$defs": {"Person": {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                                "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 120},
                                                                 {"type": "null"}]}}}}}
TREE = {"type": "object", "additionalProperties": False, "required": ["label", "children"],
        "properties": {"label": {"type": "string", "maxLength": 8},
                       "children": {"type": "array", "maxItems": 2, "items": {"$ref": "#"}}}}


# a "$ref" inside a const is data, which stays as it is
CONST_REF = {"type": "object", "additionalProperties": False, "required": ["k"],
             "properties": {"k": {"const": {"$ref": "#/x"}}}}


@pytest.mark.parametrize("params", [BOOKING, TREE, None, CONST_REF], ids=["defs", "recursive", "no-parameters", "const-ref"])
def test_tool_schemas_keep_their_references(client, model_id, params):
    # Each tool's "#" is its parameters' root; a function without parameters takes none ({}).
    fn = {"name": "act", "description": "do it"} | ({"parameters": params} if params else {})
    tools = [{"type": "function", "function": fn}, TOOLS[1]]
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Book two nights for Ann, 30."}],
                                       tools=tools, tool_choice={"type": "function", "function": {"name": "act"}},
                                       parallel_tool_calls=False, max_tokens=60 if params is TREE else 120, temperature=0)
    ch = r.choices[0]
    if params is TREE and ch.finish_reason == "length":  # greedy, it may nest until stopped: "#" led
        text = ch.message.content                        # back to the tree, not to the whole reply
        assert text.count('"tool_calls"') == 1 and text.count('"label"') >= 2, text
        return
    assert ch.finish_reason == "tool_calls", ch
    args = json.loads(ch.message.tool_calls[0].function.arguments)
    jsonschema.validate(args, params or {"type": "object", "maxProperties": 0})


CITY = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
        "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}}}
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


def test_tools_with_response_format(server, client, model_id):
    # OpenAI's tools with response_format: a call, or an answer held to the schema, whose JSON is
    # the content, whole and streamed; the model reads the schema with the tools.
    body = dict(model=model_id, messages=CAPITAL, tools=TOOLS, max_tokens=60, temperature=0,
                response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": CITY}})
    ch = client.chat.completions.create(**body).choices[0]
    assert ch.finish_reason == "stop" and not ch.message.tool_calls, ch  # it answers here
    jsonschema.validate(json.loads(ch.message.content), CITY)
    parts = [c.choices[0].delta.content for c in client.chat.completions.create(stream=True, **body)
             if c.choices and c.choices[0].delta.content]
    assert "".join(parts) == ch.message.content, parts
    prompt = detokenized_prompt(server, {"model": model_id, "messages": CAPITAL, "tools": TOOLS,
                                         "response_format": body["response_format"]})
    assert "JSON valid for this schema" in prompt and '"maxLength":20' in prompt, prompt
    # required: calls only, whatever the format; none: the format alone
    ch = client.chat.completions.create(**(body | {"tool_choice": "required", "parallel_tool_calls": False})).choices[0]
    check_calls(ch.message.tool_calls)
    ch = client.chat.completions.create(**(body | {"tool_choice": "none"})).choices[0]
    jsonschema.validate(json.loads(ch.message.content), CITY)
    # the Responses API: text.format with tools
    r = client.responses.create(model=model_id, input=CAPITAL[0]["content"], max_output_tokens=60, temperature=0,
                                tools=[{"type": "function", "name": "add", "parameters": ADD}],
                                text={"format": {"type": "json_schema", "name": "place", "schema": CITY}})
    if r.output[0].type == "function_call":
        jsonschema.validate(json.loads(r.output[0].arguments), ADD)
    else:
        jsonschema.validate(json.loads(r.output_text), CITY)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_streamed_logprobs_add_up_to_the_whole(client, model_id, choice):
    # A tool reply streams as answer characters or whole calls, not tokens: each chunk carries the
    # logprobs of the tokens since the last one, and together they are the whole reply's.
    body = dict(model=model_id, messages=ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False,
                max_tokens=40, temperature=0, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**body).choices[0].logprobs.content
    streamed = [t for c in client.chat.completions.create(stream=True, **body)
                if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    # (the second request reuses the first's prompt from the prefix cache, which computes the
    # first token's logits in another split of the prompt: equal to float rounding)
    assert [t.token for t in streamed] == [t.token for t in whole] and len(whole) > 5, (streamed, whole)
    for a, b in zip(streamed, whole):
        assert a.logprob == pytest.approx(b.logprob, abs=2e-2) and len(a.top_logprobs) == len(b.top_logprobs) == 2


def test_openai_parse_helpers(client, model_id):
    # The openai package's own helpers: pydantic models as strict function tools (pydantic writes
    # "$defs" and "$ref") and as response_format, read back by parse() and by the stream helper.
    import openai
    from typing import List, Literal, Optional

    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: Optional[int]

    class Booking(BaseModel):
        guest: Person
        nights: int
        room: Literal["single", "double"]
        extras: List[str]

    class Place(BaseModel):
        city: str
        country: str

    ask = [{"role": "user", "content": "Book a double room for Ann, 30, two nights."}]
    body = dict(model=model_id, messages=ask, tools=[openai.pydantic_function_tool(Booking)], tool_choice="required",
                parallel_tool_calls=False, max_tokens=150, temperature=0)
    m = client.chat.completions.parse(**body).choices[0].message
    assert isinstance(m.tool_calls[0].function.parsed_arguments, Booking), m
    with client.chat.completions.stream(**body) as s:
        done = [e.parsed_arguments for e in s if e.type == "tool_calls.function.arguments.done"]
    assert done == [m.tool_calls[0].function.parsed_arguments]
    r = client.chat.completions.parse(model=model_id, messages=CAPITAL, tools=[openai.pydantic_function_tool(Booking)],
                                      response_format=Place, max_tokens=150, temperature=0).choices[0]
    assert isinstance(r.message.parsed, Place) if not r.message.tool_calls else \
        isinstance(r.message.tool_calls[0].function.parsed_arguments, Booking), r


def test_responses_auto_answer_is_its_text(client, model_id):
    # An answer ({"response": "..."}) is the message's text on the Responses API as on chat, not
    # the JSON it came in, whole and streamed.
    tools = [{"type": "function", "name": "add", "description": "a + b", "parameters": ADD}]
    chat = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=30, temperature=0,
                                          tools=[{"type": "function", "function": {"name": "add", "description": "a + b",
                                                                                    "parameters": ADD}}]).choices[0]
    assert chat.message.content and not chat.message.tool_calls, chat
    r = client.responses.create(model=model_id, input=ASK[0]["content"], tools=tools, max_output_tokens=30,
                                temperature=0)
    assert r.output_text == chat.message.content, (r.output_text, chat.message.content)
    events = list(client.responses.create(model=model_id, input=ASK[0]["content"], tools=tools,
                                          max_output_tokens=30, temperature=0, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert [e.text for e in events if e.type == "response.output_text.done"] == [chat.message.content]
    assert "".join(deltas) == chat.message.content and len(deltas) > 3, deltas  # as it came


def test_responses_cut_reply_streams_its_calls(client, model_id):
    # test_a_cut_reply_keeps_its_whole_calls on the Responses API: the finished calls are
    # function_call items, streamed one by one as each is whole, and the response is incomplete.
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
             {"type": "function", "name": "add", "parameters": BIG}]
    body = dict(model=model_id, input="What is the weather in Paris and in Rome?", tools=tools, tool_choice="required",
                max_output_tokens=120, temperature=0)
    r = client.responses.create(**body)
    assert r.status == "incomplete" and len(r.output) >= 2, r
    assert all(o.type == "function_call" and o.status == "completed" for o in r.output), r.output
    events, at = [], []
    for e in client.responses.create(stream=True, **body):
        events.append(e)
        at.append(time.monotonic())
    kinds = [e.type for e in events]
    # the first call is whole after about a quarter of the tokens: its item comes then, not at the end
    assert at[2] - at[0] < 0.8 * (at[-1] - at[0]), at
    per_item = ["response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done"]
    assert kinds == ["response.created", "response.in_progress"] + per_item * len(r.output) + ["response.incomplete"], kinds
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(d.name, d.arguments) for d in done] == [(o.name, o.arguments) for o in r.output]
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == list(range(len(done)))
    assert events[-1].response.status == "incomplete" and len(events[-1].response.output) == len(done)


def test_auto_answers_or_calls(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0)
    ch = r.choices[0]
    if ch.finish_reason == "tool_calls":
        check_calls(ch.message.tool_calls)
    elif ch.finish_reason == "stop":  # {"response": ...}: its text is the content
        assert ch.message.tool_calls is None and not ch.message.content.lstrip().startswith('{"response"')
    else:  # cut short: the answer's characters so far, the calls it finished, or a cut call's raw text
        assert ch.finish_reason == "length", ch
        if ch.message.tool_calls:
            check_calls(ch.message.tool_calls)
        else:
            assert not ch.message.content.lstrip().startswith('{"response"') or '"tool_calls"' in ch.message.content, ch


def test_auto_answer_streams_as_it_comes(client, model_id):
    # {"response": "..."} streams its characters as they come, escapes decoded, and adds up to the
    # whole answer's content; calls would be held until whole.
    body = dict(model=model_id, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0)
    whole = client.chat.completions.create(**body).choices[0]
    deltas, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **body):
        deltas += [chunk.choices[0].delta.content] if chunk.choices[0].delta.content else []
        finish = chunk.choices[0].finish_reason or finish
    assert not whole.message.tool_calls and '"tool_calls"' not in whole.message.content, whole  # it answers here
    assert "".join(deltas) == whole.message.content and finish == whole.finish_reason, (deltas, whole)
    assert len(deltas) > 3, deltas  # as it came, not at the end


def test_stream_gives_the_same_call(client, model_id):
    body = dict(model=model_id, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                max_tokens=80, temperature=0)
    whole = client.chat.completions.create(**body).choices[0].message.tool_calls[0]
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **body):
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            c["name"] += tc.function.name or ""
            c["arguments"] += tc.function.arguments or ""
            c["id"] = tc.id or c.get("id")
        assert not d.content, d
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and list(calls) == [0]
    assert calls[0]["name"] == whole.function.name and json.loads(calls[0]["arguments"]) == json.loads(whole.function.arguments)
    assert ID.match(calls[0]["id"])


def detokenized_prompt(server, body):
    toks = requests.post(server.url + "/tokenize", json=body, timeout=60).json()["tokens"]
    return requests.post(server.url + "/detokenize", json={"tokens": toks}, timeout=60).json()["prompt"]


def test_the_model_reads_tools_calls_and_results(server, model_id):
    convo = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"}]
    text = detokenized_prompt(server, {"messages": convo, "tools": TOOLS})
    assert '"name":"get_weather","description":"The weather in a city"' in text, text
    assert '{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius"}}]}' in text, text
    assert '{"tool_response":{"tool_call_id":"call_1","content":"18 degrees and sunny"}}' in text, text
    # past arguments as written, white space aside: numbers keep their digits (not 1e+15, 0.1)
    big = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1000000000000000, "b": 0.10}'}}]}]
    text = detokenized_prompt(server, {"messages": ASK + big, "tools": TOOLS})
    assert '"arguments":{"a":1000000000000000,"b":0.10}' in text, text
    # a system message keeps its words first; tool_choice none offers no tools
    with_system = detokenized_prompt(server, {"messages": [{"role": "system", "content": "Be brief."}] + ASK, "tools": TOOLS})
    assert "Be brief.\n\n# Tools" in with_system, with_system
    assert "# Tools" not in detokenized_prompt(server, {"messages": ASK, "tools": TOOLS, "tool_choice": "none"})
    r = post(server, {"messages": convo, "tools": TOOLS, "tool_choice": "none", "max_tokens": 8})
    assert r.status_code == 200 and "tool_calls" not in r.json()["choices"][0]["message"], r.text
    r = post(server, {"messages": convo, "tools": TOOLS, "max_tokens": 8})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,param,words", [
    ({"tools": {"type": "function"}}, "tools", "array"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools", "function tools only"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]},
     "tools", "twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "number", "multipleOf": 3}}}}}]}, "tools", "multipleOf"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, "tools", "JSON Schema"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "not among"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", None),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add\u0000x"}}}, "tool_choice", None),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
    ({"tools": TOOLS, "guided_regex": "a+"}, "guided_regex", "JSON Schema or json_object"),
    ({"tools": TOOLS, "structured_outputs": {"choice": ["a"]}}, "structured_outputs", "JSON Schema or json_object"),
    ({"messages": ASK + [{"role": "tool", "tool_call_id": "1"}]}, "messages", "content"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages", "assistant"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                                                              "function": {"name": "f", "arguments": {}}}]}]},
     "messages", "arguments"),
    ({"messages": ASK + [{"role": "tool", "content": "x", "tool_call_id": 5}]}, "messages", "tool_call_id"),
])
def test_bad_tools(server, body, param, words):
    r = post(server, {"messages": ASK, "max_tokens": 4, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    if words:
        assert words in err["message"], err


def test_responses_function_tools(client, model_id):
    # The Responses API's flat function tools, function_call items and their outputs, whole and
    # streamed through the openai package's typed events.
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    r = client.responses.create(model=model_id, input=ASK[0]["content"], tools=tools, tool_choice="required",
                                parallel_tool_calls=False, temperature=0, max_output_tokens=80)
    assert r.status == "completed" and [o.type for o in r.output] == ["function_call"], r
    call = r.output[0]
    assert ID.match(call.call_id) and call.name in PARAMS and r.parallel_tool_calls is False and len(r.tools) == 2
    jsonschema.validate(json.loads(call.arguments), PARAMS[call.name])
    r2 = client.responses.create(model=model_id, tools=tools, temperature=0, max_output_tokens=8, input=[
        ASK[0], {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees and sunny"}])
    assert r2.status in ("completed", "incomplete") and r2.output, r2
    events = list(client.responses.create(model=model_id, input=ASK[0]["content"], tools=tools, stream=True,
                                          tool_choice={"type": "function", "name": "add"}, parallel_tool_calls=False,
                                          temperature=0, max_output_tokens=80))
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"], kinds
    done = events[-1].response.output[0]
    assert done.name == "add" and events[3].delta == done.arguments
    jsonschema.validate(json.loads(done.arguments), ADD)


def test_named_tool_holds_under_sampling(client, model_id):
    # Sampled hot, the model names the other tool now and then when the grammar lets it; a named
    # tool_choice allows only that one.
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, parallel_tool_calls=False,
                                       tool_choice={"type": "function", "function": {"name": "add"}},
                                       max_tokens=60, temperature=1.5, top_p=1, seed=11, n=4, extra_body={"top_k": 0, "min_p": 0})
    for ch in r.choices:
        if ch.finish_reason == "tool_calls":
            check_calls(ch.message.tool_calls, {"add": ADD})
        else:
            assert ch.finish_reason == "length" and '"name": "add"' in ch.message.content.replace('":"', '": "'), ch
