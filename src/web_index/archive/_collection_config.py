"""Collections, as ``collections.yaml`` declares them (the forms of pywb's
distributed-archive configuration, full and shorthand).

A collection is one or more *steps* looked up in turn (``sequence``), the
first step that finds anything answering; a collection without ``sequence``
is one step. A step has one index source (``index``) or several queried at
once (``index_group``, each given ``index_timeout`` seconds), and the
resource loaders (``resource``) that fetch what its rows point at.

Index sources, shorthand and full (``type:``):

- a local folder or ``file://`` path: a web-index store if it holds one
  (``type: web-index``), else a folder of ``.cdxj`` indexes or one ``.cdxj``
  file (``type: file``), whose WARCs are looked for next to it;
- ``s3://bucket/prefix``: a web-index store;
- ``cdx+URL [replay-prefix]`` (``type: cdx``, ``api_url``, ``replay_url``):
  a CDX server; without a replay prefix it is the API URL less a trailing
  ``-cdx``, ``/cdx`` or ``/index`` (pywb's and this server's conventions);
- ``memento+URL`` (``type: memento``, ``timegate_url``, ``timemap_url``,
  ``replay_url``): a Memento archive, its TimeMaps at ``URL/timemap/link/``;
- ``$live`` (``type: live``): the live web, through the fetchers.

Resource loaders: ``$live``, ``warc-prefix+PATH-OR-URL`` (the WARC's name is
appended), ``warc-index+PATH-OR-URL`` (a text file of ``name path`` lines) and
``warc-index+redis://HOST:PORT/DB/KEY`` (a Redis hash from name to path); a
bare path or URL is a prefix, or an index when it ends in ``.txt``. Without
``resource``, a step loads with ``$live`` only, as pywb assumes.

Every problem is an :class:`~web_index.errors.InvalidRecordError` naming its
place (``collections.many.index_timeout``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from web_index.errors import InvalidRecordError
from web_index.storage import STORE_MARKER

__all__ = [
    "DEFAULT_INDEX_TIMEOUT",
    "CollectionSpec",
    "LoaderSpec",
    "SourceSpec",
    "StepSpec",
    "load_collections",
    "parse_collections",
]

DEFAULT_INDEX_TIMEOUT = 10.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED = frozenset({"api", "search", "static"})  # the server's own paths
_SOURCE_KEYS = {
    "web-index": {"path"},
    "file": {"path"},
    "cdx": {"api_url", "replay_url"},
    "memento": {"timegate_url", "timemap_url", "replay_url"},
    "live": set(),
}
_STEP_KEYS = {"index", "index_group", "resource", "index_timeout"}


@dataclass(frozen=True)
class SourceSpec:
    """One index source: ``kind`` is ``web-index``, ``file``, ``cdx``,
    ``memento`` or ``live``; the URLs carry ``{url}`` and ``{timestamp}``."""

    name: str
    kind: str
    location: str = ""  # the store, the CDXJ path, the CDX API or the TimeGate
    replay: str = ""
    timemap: str = ""


@dataclass(frozen=True)
class LoaderSpec:
    """One resource loader: ``kind`` is ``live``, ``warc-prefix`` or ``warc-index``."""

    kind: str
    location: str = ""


@dataclass(frozen=True)
class StepSpec:
    sources: tuple[SourceSpec, ...]
    timeout: float
    loaders: tuple[LoaderSpec, ...]


@dataclass(frozen=True)
class CollectionSpec:
    name: str
    steps: tuple[StepSpec, ...]

    @property
    def sources(self) -> list[SourceSpec]:
        return [s for step in self.steps for s in step.sources]


def load_collections(path: Path) -> dict[str, CollectionSpec]:
    """The collections of a ``collections.yaml``; relative paths in it are
    relative to its folder."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRecordError(str(path), f"cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InvalidRecordError(where, f"not YAML: {getattr(exc, 'problem', None) or exc}") from None
    try:
        return parse_collections(data, base=path.parent)
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{path}: {exc.field}", exc.problem) from None


def parse_collections(data: Any, *, base: Path) -> dict[str, CollectionSpec]:
    """The collections of a parsed ``collections.yaml`` (``{"collections": {...}}``)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("collections"), Mapping):
        raise InvalidRecordError("collections", "expected a mapping of collection names")
    out: dict[str, CollectionSpec] = {}
    for name, body in data["collections"].items():
        where = f"collections.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _RESERVED:
            raise InvalidRecordError(
                where, f"a name is letters, digits, '_', '.' and '-' (not {', '.join(sorted(_RESERVED))})"
            )
        if isinstance(body, Mapping) and "sequence" in body:
            extra = set(body) - {"sequence"}
            if extra:
                raise InvalidRecordError(f"{where}.{sorted(extra)[0]}", "not allowed next to sequence")
            steps = body["sequence"]
            if not isinstance(steps, list) or not steps:
                raise InvalidRecordError(f"{where}.sequence", "expected a list of steps")
            out[name] = CollectionSpec(
                name, tuple(_step(name, s, f"{where}.sequence[{i}]", base) for i, s in enumerate(steps))
            )
        else:
            out[name] = CollectionSpec(name, (_step(name, body, where, base),))
    if not out:
        raise InvalidRecordError("collections", "no collections")
    return out


def _step(name: str, body: Any, where: str, base: Path) -> StepSpec:
    if isinstance(body, str):
        return StepSpec((_source(name, body, where, base),), DEFAULT_INDEX_TIMEOUT, (LoaderSpec("live"),))
    if not isinstance(body, Mapping):
        raise InvalidRecordError(where, "expected a source or a mapping with index or index_group")
    unknown = set(body) - _STEP_KEYS
    if unknown:
        raise InvalidRecordError(f"{where}.{sorted(unknown)[0]}", f"unknown; expected {sorted(_STEP_KEYS)}")
    if ("index" in body) == ("index_group" in body):
        raise InvalidRecordError(where, "give one of index and index_group")
    sources: tuple[SourceSpec, ...]
    if "index" in body:
        sources = (_source(name, body["index"], f"{where}.index", base),)
    else:
        group = body["index_group"]
        if not isinstance(group, Mapping) or not group:
            raise InvalidRecordError(f"{where}.index_group", "expected a mapping of source names")
        sources = tuple(
            _source(str(n), s, f"{where}.index_group.{n}", base, check_name=True) for n, s in group.items()
        )
    timeout = body.get("index_timeout", DEFAULT_INDEX_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise InvalidRecordError(
            f"{where}.index_timeout", f"{timeout!r} is not a number of seconds up to 600"
        )
    if "resource" in body:
        resource = body["resource"]
        entries = resource if isinstance(resource, list) else [resource]
        loaders = tuple(_loader(e, f"{where}.resource", base) for e in entries)
    else:
        loaders = (LoaderSpec("live"),)
    return StepSpec(sources, float(timeout), loaders)


def _source(name: str, spec: Any, where: str, base: Path, *, check_name: bool = False) -> SourceSpec:
    if check_name and not _NAME.fullmatch(name):
        raise InvalidRecordError(where, "a source name is letters, digits, '_', '.' and '-'")
    if isinstance(spec, str):
        return _shorthand(name, spec.strip(), where, base)
    if not isinstance(spec, Mapping):
        raise InvalidRecordError(where, "expected a source: a path, cdx+URL, memento+URL, $live or a mapping")
    kind = spec.get("type")
    if kind not in _SOURCE_KEYS:
        raise InvalidRecordError(f"{where}.type", f"{kind!r} is not one of {', '.join(_SOURCE_KEYS)}")
    keys = _SOURCE_KEYS[kind]
    unknown = set(spec) - keys - {"type"}
    if unknown:
        raise InvalidRecordError(f"{where}.{sorted(unknown)[0]}", f"unknown for type {kind}")
    for key in keys:
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise InvalidRecordError(f"{where}.{key}", "required: a string")
    if kind in ("web-index", "file"):
        return _local(name, spec["path"], where, base, kind)
    needs = {"api_url": ("{url}",), "timemap_url": ("{url}",), "replay_url": ("{timestamp}", "{url}")}
    for key, marks in needs.items():
        missing = [m for m in marks if key in spec and m not in spec[key]]
        if missing:
            raise InvalidRecordError(f"{where}.{key}", f"has no {' or '.join(missing)} to fill in")
    if kind == "cdx":
        return SourceSpec(name, "cdx", _http(spec["api_url"], where), _http(spec["replay_url"], where))
    if kind == "memento":
        urls = [_http(spec[k], where) for k in ("timegate_url", "timemap_url", "replay_url")]
        return SourceSpec(name, "memento", urls[0], urls[2], urls[1])
    return SourceSpec(name, "live")


def _shorthand(name: str, text: str, where: str, base: Path) -> SourceSpec:
    if text == "$live":
        return SourceSpec(name, "live")
    if text.startswith("cdx+"):
        api, _, replay = text[4:].partition(" ")
        api = _http(api.strip(), where)
        replay = replay.strip()
        if not replay:
            for tail in ("-cdx", "/cdx", "/index"):
                if api.rstrip("/").endswith(tail):
                    replay = api.rstrip("/")[: -len(tail)] + "/"
                    break
            else:
                raise InvalidRecordError(where, f"no replay prefix for {api}: give it after a space")
        elif replay.startswith("/"):  # a path on the CDX server's host
            parts = urlsplit(api)
            replay = f"{parts.scheme}://{parts.netloc}{replay}"
        replay = _http(replay, where).rstrip("/") + "/{timestamp}id_/{url}"
        return SourceSpec(name, "cdx", api + ("&" if "?" in api else "?") + "url={url}", replay)
    if text.startswith("memento+"):
        root = _http(text[8:].strip(), where).rstrip("/") + "/"
        return SourceSpec(
            name,
            "memento",
            root + "timegate/{url}",
            root + "{timestamp}id_/{url}",
            root + "timemap/link/{url}",
        )
    if text.startswith("s3://"):
        return SourceSpec(name, "web-index", text)
    return _local(name, text, where, base, None)


def _local(name: str, text: str, where: str, base: Path, kind: str | None) -> SourceSpec:
    if text.startswith("s3://"):
        if kind == "file":
            raise InvalidRecordError(where, "a CDXJ index is a local file or folder")
        return SourceSpec(name, "web-index", text)
    path = base / Path(text.removeprefix("file://"))
    if not path.exists():
        raise InvalidRecordError(where, f"{path} does not exist")
    is_store = path.is_dir() and (path / STORE_MARKER).exists()
    if kind is None:
        kind = "web-index" if is_store else "file"
    if kind == "web-index" and not is_store:
        raise InvalidRecordError(where, f"{path} is not a web-index store")
    if kind == "file" and not ((path.is_dir() and any(path.glob("*.cdxj"))) or path.suffix == ".cdxj"):
        raise InvalidRecordError(
            where, f"{path} is neither a web-index store nor a .cdxj file or folder of them"
        )
    return SourceSpec(name, kind, str(path))


def _http(url: str, where: str) -> str:
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise InvalidRecordError(where, f"{url!r} is not an http(s) URL")
    return url


def _loader(entry: Any, where: str, base: Path) -> LoaderSpec:
    if not isinstance(entry, str) or not entry.strip():
        raise InvalidRecordError(where, f"{entry!r} is not a loader: $live, warc-prefix+..., warc-index+...")
    text = entry.strip()
    if text == "$live":
        return LoaderSpec("live")
    kind = None
    for prefix in ("warc-prefix+", "warc-index+"):
        if text.startswith(prefix):
            kind, text = prefix[:-1], text[len(prefix) :]
    scheme = urlsplit(text).scheme
    if kind is None:
        kind = "warc-index" if text.endswith(".txt") or scheme == "redis" else "warc-prefix"
    if scheme in ("http", "https") or (scheme == "redis" and kind == "warc-index"):
        return LoaderSpec(kind, text)
    if scheme not in ("", "file"):
        raise InvalidRecordError(where, f"{entry!r}: a loader reads files, http(s) URLs or (an index) redis")
    path = base / Path(text.removeprefix("file://"))
    if not path.exists():
        raise InvalidRecordError(where, f"{path} does not exist")
    return LoaderSpec(kind, str(path) + ("/" if kind == "warc-prefix" and path.is_dir() else ""))
