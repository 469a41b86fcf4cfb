"""Every error web-index raises survives pickling whole: a Dask worker's error (a broken WARC
record in a cluster's import) reaches the client as the same error, with its fields."""

from __future__ import annotations

import inspect
import pickle

import pytest

import web_index.errors as errors

EXAMPLES = [
    errors.WebIndexError("something"),
    errors.InvalidRecordError("data[1].is_final", "must be true"),
    errors.InvalidURLError("ftp://x", "not an http(s) URL"),
    errors.StoreError("cannot write"),
    errors.CorruptFileError("get/2024/05/a.parquet", "bad footer"),
    errors.ConflictError("lost"),
    errors.MissingExtraError("pip install 'web-index[s3]'"),
    errors.ClusterError("no Dask scheduler"),
    errors.WarcError("a.warc.gz", 1234, "record cut short"),
    errors.WaczError("a.wacz", "hash differs", member="archive/a.warc.gz"),
    errors.SearchError("x"),
    errors.SearchQueryError("bad query"),
    errors.SiteNotFoundError("no site"),
    errors.SearchUnavailableError("down"),
]


def test_every_error_class_has_an_example() -> None:
    classes = {
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.WebIndexError)
    }
    assert classes == {type(e) for e in EXAMPLES}


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_pickles_whole(error: errors.WebIndexError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error) and again.args == error.args
    assert vars(again) == vars(error)
