"""The crawl and site-search pipeline: messages, brokers and the workers' roles."""

from web_index.crawl._css import replace_css_urls as replace_css_urls
from web_index.crawl._failures import FailureGroup
from web_index.crawl._indexer import Indexer
from web_index.crawl._local_packs import LocalPacks
from web_index.crawl._messages import (
    CALLBACKS,
    MESSAGES,
    CrawlSpec,
    Drop,
    FullEnd,
    Heartbeat,
    IncrementalEnd,
    Index,
    IndexCrawl,
    Load,
    Message,
    MessageError,
    PackFull,
    PackIncremental,
    Register,
    ResetTimer,
    Results,
    Scope,
    Search,
    StartTimer,
    Update,
    decode,
    encode,
)
from web_index.crawl._messages import Crawl as Crawl
from web_index.crawl._orchestrator import Orchestrator, searcher_queue
from web_index.crawl._pages import Extracted, extract, in_scope, is_html, links_of, normalise, scope_prefix
from web_index.crawl._pipeline import (
    ROLES,
    CrawlProgress,
    CrawlResult,
    build_roles,
    crawl_site,
    default_broker,
    run_worker,
    search_site,
    site_asked,
    site_files,
    store_packs,
)
from web_index.crawl._placement import Placement
from web_index.crawl._requisites import css_requisites, requisites_of
from web_index.crawl._roles import Crawler, Packer, Timer
from web_index.crawl._routing import SearchRouter
from web_index.crawl._save import SavedPage, SaveStep, save_page
from web_index.crawl._searcher import Searcher
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl._worker import Role, Worker, WorkerStats
from web_index.crawl.queues import Broker, DeadLetter, Delivery, QueueCounts, open_broker

__all__ = [
    "CALLBACKS",
    "MESSAGES",
    "ROLES",
    "Broker",
    "Crawl",
    "CrawlProgress",
    "CrawlResult",
    "CrawlSpec",
    "Crawler",
    "DeadLetter",
    "Delivery",
    "Drop",
    "Extracted",
    "FailureGroup",
    "FullEnd",
    "Heartbeat",
    "IncrementalEnd",
    "Index",
    "IndexCrawl",
    "Indexer",
    "Load",
    "LocalPacks",
    "Message",
    "MessageError",
    "Orchestrator",
    "PackFull",
    "PackIncremental",
    "Packer",
    "Placement",
    "QueueCounts",
    "Register",
    "ResetTimer",
    "Results",
    "Role",
    "SaveStep",
    "SavedPage",
    "Scope",
    "Search",
    "SearchRouter",
    "Searcher",
    "SiteFiles",
    "StartTimer",
    "Timer",
    "Update",
    "Worker",
    "WorkerStats",
    "build_roles",
    "check_site",
    "crawl_site",
    "css_requisites",
    "decode",
    "default_broker",
    "encode",
    "extract",
    "in_scope",
    "is_html",
    "links_of",
    "normalise",
    "open_broker",
    "requisites_of",
    "run_worker",
    "save_page",
    "scope_prefix",
    "search_site",
    "searcher_queue",
    "site_asked",
    "site_files",
    "store_packs",
]
