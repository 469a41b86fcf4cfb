"""``verify``: check every file and every invariant of a store; change nothing."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from web_index.errors import CorruptFileError, InvalidRecordError, StoreError
from web_index.models import RecordType, month_bounds, payload_digests
from web_index.storage._files import FORMAT_KEY, outdated, schema_matches, visible_files
from web_index.storage._layout import TMP_DIR, Partition, StoredFile, parse_file_name
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN, SORT_KEYS, TS_COLUMN, schemas
from web_index.storage._store import Store
from web_index.storage.buffer import MethodPartition
from web_index.storage.indexes import capture_index_findings, index_path
from web_index.storage.payloads import Wanted, read_payloads
from web_index.urls import domain_of, url_key

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Finding", "VerifyReport", "verify"]


@dataclass(frozen=True)
class Finding:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class VerifyReport:
    """What :func:`verify` found. ``problems`` break an invariant; ``notes`` are
    harmless leftovers of interrupted work that the next flush or compaction
    tidies up."""

    problems: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    files: int = 0
    records: int = 0
    buffered_attempts: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(store: Store, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    # Here, not at the top: these read the index against the files with polars, which a
    # store opened to be read never needs (27 MiB and ~120 ms of import).
    from web_index.storage.indexes import index_disagreement, index_note

    report = VerifyReport()
    # Per method partition: request ids of successful metadata and of data chains.
    meta_success: dict[MethodPartition, set[str]] = defaultdict(set)
    meta_all: dict[MethodPartition, set[str]] = defaultdict(set)
    data_ids: dict[MethodPartition, set[str]] = defaultdict(set)

    for mp, flush_id, attempt in store.buffer.iter_all():
        report.buffered_attempts += 1
        state = attempt.metadata.get("state")
        meta_all[mp].add(attempt.request_id)
        if state == "success":
            meta_success[mp].add(attempt.request_id)
        if attempt.responses:
            data_ids[mp].add(attempt.request_id)
        if flush_id is not None:
            report.notes.append(
                Finding(f"buffer {mp}", f"flush {flush_id} was interrupted; the next flush redoes it")
            )

    tmp = store.backend.list_files(TMP_DIR)
    if tmp:
        report.notes.append(
            Finding(TMP_DIR, f"{len(tmp)} temporary file(s) of writes in progress or interrupted")
        )

    work: list[tuple[Partition, list[StoredFile]]] = []
    for type in RecordType:
        for year, month in store.months_out_of_range(type):
            report.problems.append(
                Finding(
                    f"{type.value}/{year:04d}/{month:02d}",
                    "a month outside the times the store accepts (1970 to 9998): queries skip it;"
                    " move the folder out of the store",
                )
            )
        for year, month in store.months(type):
            folder = f"{type.value}/{year:04d}/{month:02d}"
            for info in store.backend.list_files(folder):
                if parse_file_name(info.name) is None:
                    report.problems.append(
                        Finding(f"{folder}/{info.name}", "foreign file name in the store layout")
                    )
            for domain, files in store.month_files(type, year, month).items():
                work.append((Partition(type, year, month, domain), files))
            note = index_note(store.backend, type, year, month)
            if note is not None:  # derived data: costs speed, never answers
                report.notes.append(Finding(index_path(type, year, month), note))
            try:
                wrong = index_disagreement(store.backend, type, year, month)
            except (OSError, StoreError) as exc:  # files changing under a concurrent compaction
                report.notes.append(Finding(index_path(type, year, month), f"not checked: {exc}"))
                wrong = None
            if wrong is not None:  # ...unless it claims to cover files it does not describe
                report.problems.append(Finding(index_path(type, year, month), wrong))
    total = len(work)
    for n, (partition, files) in enumerate(work):
        _verify_partition(store, partition, files, report, meta_success, meta_all, data_ids)
        try:
            for is_problem, where, message in capture_index_findings(store.backend, partition, files):
                (report.problems if is_problem else report.notes).append(Finding(where, message))
        except (OSError, StoreError) as exc:  # files changing under a concurrent compaction
            report.notes.append(Finding(str(partition), f"capture index not checked: {exc}"))
        if progress is not None:
            progress(n + 1, total)

    for mp in set(meta_success) | set(data_ids):
        for rid in sorted(data_ids[mp] - meta_success[mp]):
            problem = (
                "data without a metadata record" if rid not in meta_all[mp] else "data for a failed attempt"
            )
            report.problems.append(Finding(f"{mp}", f"request {rid}: {problem}"))
        for rid in sorted(meta_success[mp] - data_ids[mp]):
            report.problems.append(
                Finding(f"{mp}", f"request {rid}: successful attempt without data records")
            )
    return report


def _verify_partition(
    store: Store,
    partition: Partition,
    files: list[StoredFile],
    report: VerifyReport,
    meta_success: dict[MethodPartition, set[str]],
    meta_all: dict[MethodPartition, set[str]],
    data_ids: dict[MethodPartition, set[str]],
) -> None:
    import pyarrow as pa

    type = partition.type
    mp = MethodPartition(type.method, partition.year, partition.month, partition.domain)
    try:
        opened, dead = visible_files(store.backend, files)
    except CorruptFileError as exc:
        report.problems.append(Finding(exc.path, exc.problem))
        return
    except Exception as exc:
        report.problems.append(Finding(str(partition), f"cannot open files: {exc}"))
        return
    for f in dead:
        report.notes.append(
            Finding(f.path, "part already absorbed by the compacted file; next compaction deletes it")
        )
    lo, hi = month_bounds(partition.year, partition.month)
    seen: dict[tuple[str, int], str] = {}
    schema = schemas()[type]
    for stored, handle in opened:
        report.files += 1
        where = stored.path
        try:
            sealed = store.backend.check_file(where)
        except CorruptFileError as exc:
            report.problems.append(Finding(exc.path, exc.problem))
            continue
        except FileNotFoundError:
            report.notes.append(Finding(where, "not checked: replaced by a concurrent compaction"))
            continue
        if not sealed:
            format = (handle.metadata.metadata or {}).get(FORMAT_KEY, b"?").decode(errors="replace")
            finding = Finding(where, f"no checksum (a file of format {format})")
            (report.notes if format == "1" else report.problems).append(finding)
        if not schema_matches(type, handle.schema_arrow):
            report.problems.append(Finding(where, f"schema differs from the {type.value} schema"))
            continue
        digests = _digests_in(handle)
        if type is RecordType.GET and not digests:
            note = "no payload digests (a file of format 2): derived when read; "
            note += "`compact --min-parts 0` adds them"
            report.notes.append(Finding(where, note))
        elif outdated(handle.metadata, type, store.write_options):
            note = (
                "written by an older version (an older format, or big bodies without pages): "
                "`compact --min-parts 0` rewrites it"
            )
            report.notes.append(Finding(where, note))
        # Bodies, logs and tracebacks are decoded (checksums, decompression)
        # one row group at a time and dropped, so memory stays bounded by a row
        # group whatever the file size; the small columns are checked whole.
        heavy = [c for c in ("data", "logs", "traceback") if c in schema.names]
        light = [c for c in schema.names if c not in heavy and c in handle.schema_arrow.names]
        refs = [REF_COLUMN] if REF_COLUMN in handle.schema_arrow.names else []
        try:
            wrong_digests = sum(
                _wrong_digests(handle.read_row_group(g, columns=heavy + digests + refs))
                for g in range(handle.metadata.num_row_groups)
            )
            table = handle.read(columns=light)
        except Exception as exc:
            report.problems.append(Finding(where, f"unreadable: {exc}"))
            continue
        if wrong_digests:
            problem = f"{wrong_digests} payload digests differ from their bodies"
            report.problems.append(Finding(where, problem))
        if refs:
            report.problems.extend(_reference_problems(store, stored, table))
        report.records += table.num_rows
        ts_col = TS_COLUMN[type]
        keys = (
            table.select(SORT_KEYS[type])
            .cast(
                pa.schema(
                    [
                        pa.field(c, pa.int64() if c == ts_col else table.schema.field(c).type)
                        for c in SORT_KEYS[type]
                    ]
                )
            )
            .to_pylist()
        )
        rows = table.select(["url", "url_key"]).to_pylist()
        if any(tuple(a.values()) > tuple(b.values()) for a, b in itertools.pairwise(keys)):
            report.problems.append(Finding(where, "rows are not sorted by (url_key, timestamp, request_id)"))
        checked_urls: set[str] = set()
        for key, row in zip(keys, rows, strict=True):
            if not lo <= key[ts_col] < hi:
                report.problems.append(
                    Finding(
                        where,
                        f"request {key['request_id']}: timestamp outside {partition.folder}",
                    )
                )
            if row["url"] not in checked_urls:
                checked_urls.add(row["url"])
                try:
                    if url_key(row["url"]) != row["url_key"]:
                        report.problems.append(Finding(where, f"url_key of {row['url']!r} is stale"))
                    if domain_of(row["url"]) != partition.domain:
                        report.problems.append(
                            Finding(where, f"{row['url']!r} belongs in domain {domain_of(row['url'])}")
                        )
                except InvalidRecordError as exc:
                    report.problems.append(Finding(where, f"stored URL is invalid: {exc}"))
            identity = (key["request_id"], key.get("chain_index", 0))
            if identity in seen:
                report.problems.append(
                    Finding(where, f"request {key['request_id']} also stored in {seen[identity]}")
                )
            seen[identity] = where
        if type.is_metadata:
            states = table.column("state").to_pylist()
            for key, state in zip(keys, states, strict=True):
                meta_all[mp].add(key["request_id"])
                if state == "success":
                    meta_success[mp].add(key["request_id"])
        else:
            finals = table.column("is_final").to_pylist()
            chains: dict[str, list[tuple[int, bool]]] = defaultdict(list)
            for key, final in zip(keys, finals, strict=True):
                chains[key["request_id"]].append((int(key["chain_index"]), bool(final)))
            for rid, chain in chains.items():
                data_ids[mp].add(rid)
                indexes = sorted(i for i, _ in chain)
                if indexes != list(range(len(chain))):
                    report.problems.append(Finding(where, f"request {rid}: chain has gaps {indexes}"))
                    continue
                flags = [f for _, f in sorted(chain)]
                if flags[-1] is not True or any(flags[:-1]):
                    report.problems.append(
                        Finding(where, f"request {rid}: is_final must mark the last response only")
                    )


def _digests_in(handle: pq.ParquetFile) -> list[str]:
    return [c for c in DIGEST_COLUMNS if c in handle.schema_arrow.names]


def _wrong_digests(group: pa.Table) -> int:
    """Rows of a ``get`` row group whose stored digests are not their body's (a
    row that refers to its payload is checked by :func:`_reference_problems`;
    its own body must be empty)."""
    if DIGEST_COLUMNS[0] not in group.column_names:
        return 0  # written before digests were stored: they are derived when read
    columns = [group.column(c).to_pylist() for c in (BODY_COLUMN, *DIGEST_COLUMNS)]
    refs = (
        group.column(REF_COLUMN).to_pylist() if REF_COLUMN in group.column_names else [None] * group.num_rows
    )
    return sum(
        body != b"" if ref is not None else payload_digests(body) != (sha1, sha256)
        for body, sha1, sha256, ref in zip(*columns, refs, strict=True)
    )


def _reference_problems(store: Store, stored: StoredFile, table: pa.Table) -> list[Finding]:
    """Each row of this ``get`` file (``table``: its columns but the bodies) that
    refers to a payload it cannot be given; a part file never refers."""
    refs = table.column(REF_COLUMN)
    if refs.null_count == table.num_rows:
        return []
    if stored.part is not None:
        return [Finding(stored.path, "a part file holds payload references (only compacted files do)")]
    rows = table.filter(refs.is_valid()).select(["request_id", "chain_index", REF_COLUMN, DIGEST_COLUMNS[0]])
    wanted = [
        Wanted(r[REF_COLUMN], r[DIGEST_COLUMNS[0]], f"record {r['request_id']} (response {r['chain_index']})")
        for r in rows.to_pylist()
    ]
    try:
        read_payloads(store.backend, wanted)
        return []
    except (CorruptFileError, StoreError):
        pass
    found: list[Finding] = []
    for w in wanted:  # one at a time, to name each
        try:
            read_payloads(store.backend, [w])
        except CorruptFileError as exc:
            found.append(Finding(stored.path, f"{w.label}: {exc.path}: {exc.problem}"))
        except StoreError as exc:
            found.append(Finding(stored.path, f"{w.label}: {exc}"))
    return found
