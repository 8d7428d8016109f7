# The examples of docs/api.md, README.md and docs/metrics.md run against the live server, with
# `localhost:8080` replaced by its port and the default model's id in `/v1/models/<id>` by the
# served one. Each ```sh block holding `curl ` must succeed (HTTP errors fail through
# --fail-with-body) and print JSON, SSE or Prometheus text; each ```python block that makes an
# OpenAI client must run without error.
import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = {"docs/api.md": 4, "README.md": 4, "docs/metrics.md": 1}  # file -> the fewest curl blocks it holds
DEFAULT_MODEL_ID = "gemma-3-270m-q4_k_m"


def blocks(lang, keep=lambda b: True):
    found = []
    for name in DOCS:
        text = (ROOT / name).read_text()
        found += [(name, b) for b in re.findall(rf"```{lang}\n(.*?)```", text, re.S) if keep(b)]
    return found


def curl_blocks():
    found = blocks("(?:sh|bash)", lambda b: "curl " in b)
    for name, least in DOCS.items():
        assert sum(1 for n, _ in found if n == name) >= least, f"{name}: curl examples not found"
    return found


def local(block, server, model_id):
    block = block.replace(f"/v1/models/{DEFAULT_MODEL_ID}", f"/v1/models/{model_id}")
    return block.replace("localhost:8080", f"127.0.0.1:{server.port}")


def ident(param):
    name, block = param
    return f"{name}:{block.split(chr(10))[0][:60]}"


@pytest.mark.parametrize("doc", curl_blocks(), ids=ident)
def test_curl_example(server, model_id, doc):
    script = "set -euo pipefail\ncurl() { command curl --fail-with-body --max-time 120 \"$@\"; echo; }\n"
    script += local(doc[1], server, model_id)
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for out in filter(None, p.stdout.split("\n")):
        if out.startswith("data: "):
            if out != "data: [DONE]":
                json.loads(out[6:])
        elif out.startswith("#") or out.startswith("wushkv:"):
            pass  # metrics text
        else:
            json.loads(out)


@pytest.mark.parametrize("doc", blocks("python", lambda b: "OpenAI(" in b), ids=ident)
def test_python_example(server, model_id, doc):
    p = subprocess.run([sys.executable, "-c", local(doc[1], server, model_id)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
