#!/usr/bin/env python3
"""Check (not a test): tool calling and structured output through two agent frameworks as their
users call them, against a running server: the OpenAI Agents SDK (the Responses API, streamed and
not: function tools, tool results sent back, an output_type with tools) and LangChain's ChatOpenAI
(chat completions: bind_tools with a named tool_choice, streamed tool-call chunks, a tool result in
the conversation, with_structured_output by json_schema and by function calling). Each flow prints
PASS or FAIL with what came back; the exit status is the number of failures.

    python3 -m venv build/frameworks-venv
    build/frameworks-venv/bin/pip install openai-agents langchain-openai
    build/frameworks-venv/bin/python scripts/frameworks_check.py http://127.0.0.1:8080

The default model is a small base model: the flows pin what it cannot judge (a named or required
tool_choice, one call a turn, stop after the first tool), so what is checked is the server's side:
the calls parse, carry valid arguments, run, and their results reach the next turn."""
import asyncio
import sys

import requests
from pydantic import BaseModel

url = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:8080"
model = requests.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
failures = 0
calls = []


def report(name, ok, got):
    global failures
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name}: {got!r}"[:300])


async def attempt(name, flow):
    """Runs one flow; an exception is its failure, and the next flow still runs."""
    try:
        result = flow()
        if asyncio.iscoroutine(result):
            await result
    except Exception as e:  # noqa: BLE001 (any failure of the flow is reported)
        report(name, False, f"{type(e).__name__}: {e}")


class Place(BaseModel):
    city: str
    country: str


def get_weather_impl(city: str) -> str:
    calls.append(city)
    return f"sunny in {city}"


async def agents_sdk():
    from openai import AsyncOpenAI
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused")
    responses_model = OpenAIResponsesModel(model=model, openai_client=client)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return get_weather_impl(city)

    settings = ModelSettings(max_tokens=200, temperature=0, tool_choice="required", parallel_tool_calls=False)
    agent = Agent(name="weather", instructions="Answer briefly.", tools=[get_weather], model=responses_model,
                  model_settings=settings, tool_use_behavior="stop_on_first_tool")

    async def one_tool():
        del calls[:]
        r = await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        report("agents: a function tool runs", calls == ["Paris"] and r.final_output == "sunny in Paris", (calls, r.final_output))
    await attempt("agents: a function tool runs", one_tool)

    async def streamed_tool():
        del calls[:]
        streamed = Runner.run_streamed(agent, "What is the weather in Rome?", max_turns=3)
        kinds = [e.item.type async for e in streamed.stream_events() if e.type == "run_item_stream_event"]
        report("agents: streamed, the call and its output as items", calls == ["Rome"] and
               kinds == ["tool_call_item", "tool_call_output_item"] and streamed.final_output == "sunny in Rome",
               (calls, kinds, streamed.final_output))
    await attempt("agents: streamed, the call and its output as items", streamed_tool)

    async def typed_output():
        typed = Agent(name="places", instructions="Answer briefly.", tools=[get_weather], output_type=Place,
                      model=responses_model, model_settings=ModelSettings(max_tokens=200, temperature=0, parallel_tool_calls=False))
        r = await Runner.run(typed, "What is the capital of France?", max_turns=3)
        report("agents: output_type with tools", isinstance(r.final_output, Place), r.final_output)
    await attempt("agents: output_type with tools", typed_output)

    # The SDK's default: the result goes back to the model for another turn. This base model calls
    # again rather than answer, so the turn limit ends it; what counts is that the turn after the
    # result (its function_call and function_call_output items) was served.
    loop = Agent(name="loop", instructions="Answer briefly.", tools=[get_weather], model=responses_model,
                 model_settings=settings)

    async def result_back():
        del calls[:]
        try:
            r = await Runner.run(loop, "What is the weather in Oslo?", max_turns=2)
            final = r.final_output
        except MaxTurnsExceeded:
            final = "(turn limit)"
        report("agents: the tool's result goes back to the model", calls[:1] == ["Oslo"] and
               (len(calls) == 2 or final != "(turn limit)"), (calls, final))
    await attempt("agents: the tool's result goes back to the model", result_back)


async def langchain():
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return get_weather_impl(city)

    llm = ChatOpenAI(base_url=url + "/v1", api_key="unused", model=model, temperature=0, max_tokens=120)
    bound = llm.bind_tools([get_weather], tool_choice="get_weather", parallel_tool_calls=False)
    first = []

    def named_tool():
        r = bound.invoke("What is the weather in Paris?")
        first.append(r)
        report("langchain: bind_tools, a named tool", [(c["name"], sorted(c["args"])) for c in r.tool_calls] ==
               [("get_weather", ["city"])], r.tool_calls)
    await attempt("langchain: bind_tools, a named tool", named_tool)

    def streamed_calls():
        whole = None
        for chunk in bound.stream("What is the weather in Rome?"):
            whole = chunk if whole is None else whole + chunk
        report("langchain: streamed tool-call chunks", [c["name"] for c in whole.tool_calls] == ["get_weather"] and
               isinstance(whole.tool_calls[0]["args"].get("city"), str), whole.tool_calls)
    await attempt("langchain: streamed tool-call chunks", streamed_calls)

    def result_in_conversation():
        r = first[0]
        history = [HumanMessage("What is the weather in Paris?"), r,
                   ToolMessage(content=get_weather.invoke(r.tool_calls[0]["args"]), tool_call_id=r.tool_calls[0]["id"])]
        reply = llm.bind_tools([get_weather]).invoke(history)
        report("langchain: a tool result in the conversation", reply.response_metadata.get("finish_reason") in
               ("stop", "tool_calls", "length"), reply.response_metadata.get("finish_reason"))
    await attempt("langchain: a tool result in the conversation", result_in_conversation)

    for method in ("json_schema", "function_calling"):
        def structured(method=method):
            out = llm.with_structured_output(Place, method=method).invoke("What is the capital of France?")
            report(f"langchain: with_structured_output({method})", isinstance(out, Place), out)
        await attempt(f"langchain: with_structured_output({method})", structured)


async def main():
    await agents_sdk()
    await langchain()


asyncio.run(main())
print(f"{failures} failed")
sys.exit(failures)
