# Start-up failures are reported plainly and exit non-zero; flags are checked before anything loads.
import subprocess

import pytest

from conftest import BIN, free_port
import os


def run(*args, timeout=120):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    return subprocess.run([BIN, "serve", *args], capture_output=True, text=True, timeout=timeout)


def test_missing_model_file_exits_1():
    p = run("-m", "/nonexistent/model.gguf", "--port", str(free_port()))
    assert p.returncode == 1 and "cannot open /nonexistent/model.gguf" in p.stderr


def test_bad_flags_exit_2():
    assert run("--port", "70000").returncode == 2
    assert run("--max-batch", "600", "--batch-tokens", "512").returncode == 2
    assert run("--no-such-flag").returncode == 2


def test_help():
    p = run("--help")
    assert p.returncode == 0
    for flag in ("--model", "--host", "--port", "--ctx", "--max-batch", "--max-queue", "--api-key", "--api-key-file",
                 "--cors-origin", "--max-body", "--drain-timeout", "--log-prompts"):
        assert flag in p.stdout
