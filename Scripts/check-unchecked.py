#!/usr/bin/env python3
"""Two escapes from Swift's concurrency checking are allowed in Sources/ only with a reason beside them.

- `@unchecked Sendable`: a comment within the eight lines above the declaration (or on its line or
  the next) says why the type is safe to share: what is immutable, what a lock guards, which one
  task or event loop uses it.
- An unstructured task (`Task {`, `Task.detached`, `ownTask {`): a comment on its line or within the
  four lines above says why no caller's task group can own the work (an API that returns at once,
  work that outlives its caller, a callback that is not async).

Exit status 1 lists the sites without one.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
task = re.compile(r"(^|[^.\w])(Task(\.detached)?\s*(\(|\{)|ownTask\s*(\(|\{))")
missing, counts = [], {"unchecked": 0, "task": 0}
for path in sorted((root / "Sources").rglob("*.swift")):
    lines = path.read_text().split("\n")
    for index, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if "@unchecked Sendable" in code:
            counts["unchecked"] += 1
            context = lines[max(0, index - 8): index + 2]
        elif task.search(code) and "func ownTask" not in code:
            counts["task"] += 1
            context = lines[max(0, index - 4): index + 1]
        else:
            continue
        if not any("//" in other for other in context):
            missing.append(f"{path.relative_to(root)}:{index + 1}: {line.strip()}")
if missing:
    print("@unchecked Sendable or an unstructured task without a comment saying why:")
    print("\n".join(missing))
    sys.exit(1)
print(f"check-unchecked: {counts['unchecked']} @unchecked Sendable and {counts['task']} unstructured tasks in Sources/, each with its reason")
