"""A packer whose disk fills up while it builds a database, for real (a small tmpfs
in a mount namespace of the test's own, as root): the pack fails with the cause in
the log, its message is kept for a retry, nothing half-built is published or left
behind, and once there is room the retry publishes it."""

from __future__ import annotations

from pathlib import Path

from tests.test_disk_faults import _in_namespace

# Runs inside the namespace: the store and the broker on the real disk, the
# packer's working folder on a 16 MiB tmpfs, nearly all taken by a filler file.
_PACK = """
import asyncio, json, logging, os, random, sys
from datetime import UTC, datetime
from pathlib import Path
from web_index.crawl import Packer, PackFull, SiteFiles, Worker, encode
from web_index.crawl.queues import SqliteBroker
from web_index.search import PageText
from web_index.storage import LocalBackend

root, work, filler = (Path(a) for a in sys.argv[1:4])
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("web_index.crawl").addHandler(Keep())

files = SiteFiles(LocalBackend(root / "store"))
rng = random.Random(7)
words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 9))) for _ in range(20000)]
now = datetime.now(UTC)
for batch in range(4):
    texts = [PageText(url=f"http://a.test/{batch}/{i}", title=f"page {i}", fetched=now,
                      text=" ".join(rng.choices(words, k=300))) for i in range(100)]
    files.write_texts("a.test", texts)

broker = SqliteBroker(root / "queue.sqlite", max_deliveries=10)
broker.send("pack", [encode(PackFull(site="a.test"))])

async def run(seconds):
    worker = Worker(broker, [Packer(broker, files, workdir=work)], poll=0.05)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(seconds)
    worker.stop()
    await task

asyncio.run(run(3.0))  # the disk is full: the pack fails, is retried after 1 s, fails again
full = {"published": files.latest("a.test"), "counts": broker.counts("pack").__repr__(),
        "left": sorted(os.listdir(work)), "failures": [r for r in records if "failed" in r]}
os.remove(filler)
for _ in range(30):  # room again: the next retry (after its backoff) publishes it
    asyncio.run(run(1.0))
    if files.latest("a.test") is not None and broker.counts("pack").pending == 0:
        break
after = {"published": files.latest("a.test"), "pending": broker.counts("pack").pending,
         "dead": broker.counts("pack").dead, "left": sorted(os.listdir(work)),
         "failures": len([r for r in records if "failed" in r]) - len(full["failures"])}
print(json.dumps({"full": full, "after": after}))
"""


def test_a_full_disk_while_packing_loses_nothing_and_is_retried(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (tmp_path / "store").mkdir()
    setup = f"mount -t tmpfs -o size=16m tmpfs {mnt} && head -c 16252928 /dev/zero > {mnt}/filler"
    out = _in_namespace(setup, _PACK, str(tmp_path), str(mnt / "work"), str(mnt / "filler"))
    full, after = out["full"], out["after"]
    assert isinstance(full, dict) and isinstance(after, dict)
    assert full["published"] is None  # nothing half-built was published
    assert full["left"] == []  # nor left behind in the working folder
    assert full["failures"], "the packer's failure was not logged"
    assert all("disk is full" in f or "No space left" in f for f in full["failures"]), full["failures"]
    assert "dead=0" in full["counts"]  # kept for a retry, not buried
    assert after == {"published": 1, "pending": 0, "dead": 0, "left": [], "failures": 0}
