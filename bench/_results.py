"""Where a benchmark's figures go: ``bench/results/<stem>.json`` (everything) and
``<stem>.md`` (the table docs/performance.md quotes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def save(stem: str, record: Any, lines: list[str]) -> None:
    """Write ``record`` as JSON and ``lines`` as Markdown under ``stem``."""
    (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"results in bench/results/{stem}.json and .md")
