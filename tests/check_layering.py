#!/usr/bin/env python3
"""The house's stairs run one way: each room of engine/ and server/ includes only rooms on lower
floors (or itself), server/ reaches the engine only through include/wushkv/, and the engine
library reads no environment and runs no process. Prints every offending include and exits 1.

The floors are the ones engine/meson.build and server/meson.build list (bottom first); the folder
"." is a folder's own top level (engine/engine.c, server/main.c)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1])

# Lower floors first. A room may include its own files and any room before it in the list.
FLOORS = {
    "engine": ["base", "model", "tokenizer", "vulkan", "wush", "kv", "grammar", "host", ".", "research"],
    "server": ["http", "metrics", "sched", "api", "cli", "bench", "."],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
FORBIDDEN_IN_ENGINE = re.compile(r"\b(getenv|secure_getenv|popen|system|exit)\s*\(")


def room_of(top, path):
    rel = path.relative_to(ROOT / top)
    return rel.parts[0] if len(rel.parts) > 1 else "."


def included_room(top, header):
    """The room a quoted include names ("kv/kv_pool.h" -> kv, "forward.h" -> "."), or None for
    headers from elsewhere (generated SPIR-V, llhttp, the public API)."""
    parts = header.split("/")
    if len(parts) == 1:
        return "." if (ROOT / top / header).exists() else None
    return parts[0] if parts[0] in FLOORS[top] and (ROOT / top / header).exists() else None


problems = []
for top, floors in FLOORS.items():
    for path in sorted((ROOT / top).rglob("*.[ch]")):
        room = room_of(top, path)
        if room not in floors:
            problems.append(f"{path.relative_to(ROOT)}: room '{room}' is not in this check's floor list")
            continue
        text = path.read_text()
        for header in INCLUDE.findall(text):
            if top == "server" and (header.startswith("../") or (ROOT / "engine" / header).exists()
                                    and not (ROOT / "server" / header).exists()):
                problems.append(f"{path.relative_to(ROOT)}: includes engine internals \"{header}\" "
                                "(server/ uses only include/wushkv/)")
                continue
            other = included_room(top, header)
            if other is not None and floors.index(other) > floors.index(room):
                problems.append(f"{path.relative_to(ROOT)}: room '{room}' includes \"{header}\" from the "
                                f"higher floor '{other}'")
        if top == "engine":
            code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
            for m in FORBIDDEN_IN_ENGINE.finditer(code):
                problems.append(f"{path.relative_to(ROOT)}: the engine library calls {m.group(1)}() "
                                "(process concerns belong to the CLI)")

for p in problems:
    print(p)
print(f"layering: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
