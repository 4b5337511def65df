"""JSON-lines files read one object a line, with errors that name the file and line.

Why a module: SGLang's ``bench_serving`` results and kvplan's runtime step traces are both JSON
lines, and both readers owe the user the same thing on bad input (``runs.jsonl:3: not JSON``)
before checking the fields of their own format."""

from __future__ import annotations

import json
from typing import Iterator


def json_objects(text: str, where: str, error: type[Exception], what: str = "JSON object"
                 ) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of ``text``. A line that is not JSON, or
    JSON but not an object, raises ``error`` naming ``where:line`` (``what`` says what a line
    should hold)."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise error(f"{where}:{number}: not JSON") from None
        if not isinstance(rec, dict):
            raise error(f"{where}:{number}: not a {what}")
        yield number, rec
