"""For the ``--jobs`` runs of load_bench.py and warc_bench.py: what a store answers, as digests
(the same input loaded with ``jobs=1`` and ``jobs=2`` must give the same store), and the peak
memory of a process with its workers."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path
from typing import Any, NamedTuple


class Peak(NamedTuple):
    """Bytes at the peak of a process and its descendants: their RSS summed (a page shared by
    several, the fork server's modules, counted in each) and their PSS (each counted once)."""

    rss: int
    pss: int


class TreePeak:
    """The :class:`Peak` of process ``pid`` and its descendants while in the ``with`` block:
    RSS sampled every 50 ms, PSS every 0.5 s (reading it walks every page table)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss = self.pss = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        n = 0
        while not self._done.wait(0.05):
            self.rss = max(self.rss, _tree_rss(self.pid))
            n += 1
            if n % 10 == 1:
                self.pss = max(self.pss, tree_pss(self.pid))

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def peak(self) -> Peak:
        return Peak(self.rss, self.pss)


def run_sampled(command: list[str], **options: Any) -> tuple[subprocess.CompletedProcess[str], Peak]:
    """``subprocess.run(command)``, and the :class:`Peak` of the process and all its descendants
    (a loader and its worker processes)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)
    with TreePeak(proc.pid) as tree:
        out, err = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command, out, err)
    return subprocess.CompletedProcess(command, proc.returncode, out, err), tree.peak


def _tree_rss(pid: int, field: tuple[str, str] = ("status", "VmRSS:")) -> int:
    """Bytes of ``field`` (a /proc file of the process and the line it is on) summed over the
    process and its descendants."""
    total, todo = 0, [pid]
    name, key = field
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/{name}") as fh:
                total += next((int(line.split()[1]) * 1024 for line in fh if line.startswith(key)), 0)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def tree_pss(pid: int) -> int:
    """The proportional set size of the process and its descendants: each shared page (the
    fork server's modules, a file mapped by two workers) counted once, where the RSS sum
    counts it in every process that maps it."""
    return _tree_rss(pid, ("smaps_rollup", "Pss:"))


def answers_digest(root: Path) -> dict[str, Any]:
    """Every store file's rows (in file order, as Arrow IPC bytes), every capture line of
    every domain, the records per partition, and whether ``verify`` is clean."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from web_index import WebIndex
    from web_index.models import RecordType

    files = hashlib.sha256()
    for path in sorted(root.glob("*/*/*/*.parquet")):
        table = pq.read_table(path)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
            writer.write_table(table)
        files.update(str(path.relative_to(root)).encode() + b"\0" + sink.getvalue().to_pybytes())
    lines = hashlib.sha256()
    with WebIndex(root, read_only=True) as index:
        stats = index.stats()
        domains = sorted({p.domain for p in stats.partitions})
        for type in (RecordType.GET, RecordType.HEAD):
            for domain in domains:
                for line in index.captures(f"http://{domain}/", match="domain", type=type):
                    lines.update(line.encode() + b"\n")
        partitions = sorted(
            f"{p.type}/{p.year}/{p.month:02d}/{p.domain} {p.records}" for p in stats.partitions
        )
        ok = index.verify().ok
    return {
        "files": files.hexdigest(),
        "capture_lines": lines.hexdigest(),
        "partitions": hashlib.sha256("\n".join(partitions).encode()).hexdigest(),
        "records": stats.records,
        "verify_ok": ok,
    }
