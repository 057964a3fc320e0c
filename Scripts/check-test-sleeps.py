#!/usr/bin/env python3
"""Every Task.sleep in Tests/ says why: a comment on its line or on one of the three lines above.

A test waits for a condition (RealtimeTesting's waitUntil, a Recorder, a manual clock's sleepers);
a sleep is left only where nothing can be awaited (an absence sampled for a moment, a pace, a
handler that must block), and its comment says which. Exit status 1 lists the sleeps without one.
"""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
missing, total = [], 0
for path in sorted((root / "Tests").rglob("*.swift")):
    if "Snippets" in path.parts:
        continue
    lines = path.read_text().split("\n")
    for index, line in enumerate(lines):
        if "Task.sleep" not in line:
            continue
        total += 1
        if not any("//" in context for context in lines[max(0, index - 3): index + 1]):
            missing.append(f"{path.relative_to(root)}:{index + 1}: {line.strip()}")
if missing:
    print("Task.sleep without a comment saying why nothing can be awaited:")
    print("\n".join(missing))
    sys.exit(1)
print(f"check-test-sleeps: {total} Task.sleep calls in Tests/, each with its reason")
