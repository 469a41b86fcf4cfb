"""The timing loop both sides of ``lookup_bench.py`` run, each in its own interpreter
(web-index's and pywb's venv): standard library only."""

import time


def cdx_params(q, kind):
    """The CDX query of one lookup: ``closest`` (the capture nearest ``q["closest"]``) or
    ``latest`` (a simple lookup: the newest capture, ``sort=reverse``), at most one line."""
    if kind == "closest":
        return {"url": q["url"], "closest": q["closest"], "limit": "1"}
    return {"url": q["url"], "sort": "reverse", "limit": "1"}


def timed_lookups(lookup, job):
    """``lookup`` of every warm-up query, then of every query, each timed alone;
    the job's answer: ``{"seconds", "answers", "peak_rss_mib"}``."""
    for q in job["warmup"]:
        lookup(q)
    seconds, answers = [], []
    for q in job["queries"]:
        t = time.perf_counter()
        answer = lookup(q)
        seconds.append(time.perf_counter() - t)
        answers.append(answer)
    return {"seconds": seconds, "answers": answers, "peak_rss_mib": peak_rss_mib()}


def peak_rss_mib():
    # VmHWM, not getrusage: a child's ru_maxrss starts from its parent's peak.
    return _status_mib("VmHWM")


def rss_mib():
    """The process's resident memory now (VmRSS), in MiB."""
    return _status_mib("VmRSS")


def _status_mib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return None
