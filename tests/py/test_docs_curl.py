# The curl examples of docs/api.md run against the live server: each block must succeed (HTTP
# errors fail through --fail-with-body) and print JSON, SSE or Prometheus text.
import json
import pathlib
import re
import subprocess

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def blocks():
    text = DOC.read_text()
    found = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "curl " in b]
    assert len(found) >= 4
    return found


@pytest.mark.parametrize("block", blocks(), ids=lambda b: b.split("\n")[0][:60])
def test_curl_example(server, block):
    script = "set -euo pipefail\ncurl() { command curl --fail-with-body --max-time 120 \"$@\"; echo; }\n"
    script += block.replace("localhost:8080", f"127.0.0.1:{server.port}")
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
