"""Web archives in and out: WARC files (and the WARCs of WACZ packages) read into
the store and written from it (with a CDXJ index, or as a WACZ package), the CDX
server API's queries over the store, and
collections: stores, CDXJ + WARC folders, remote CDX servers and Memento
archives and the live web, looked up together (``collections.yaml``).

``__all__`` is the public API; names imported ``as`` themselves are the
internal one, for the other packages of web_index. No HTTP server lives here
(that is :mod:`web_index.server`).
"""

from web_index.archive._arc_read import read_arc
from web_index.archive._cdx import Capture as Capture
from web_index.archive._cdx import Memento as Memento
from web_index.archive._cdx import cdx_lines as cdx_lines
from web_index.archive._cdx import cdx_page as cdx_page
from web_index.archive._cdx import closest_capture as closest_capture
from web_index.archive._cdx import closest_memento as closest_memento
from web_index.archive._cdx import find_captures as find_captures
from web_index.archive._cdx import num_pages as num_pages
from web_index.archive._cdx_query import DEFAULT_LIMIT as DEFAULT_LIMIT
from web_index.archive._cdx_query import MAX_LIMIT as MAX_LIMIT
from web_index.archive._cdx_query import CdxQuery as CdxQuery
from web_index.archive._cdx_query import parse_cdx_query as parse_cdx_query
from web_index.archive._cdx_query import url_for_path as url_for_path
from web_index.archive._cdx_query import url_in_path as url_in_path
from web_index.archive._collection import Collection as Collection
from web_index.archive._collection import Loaded as Loaded
from web_index.archive._collection import SourceUnavailableError as SourceUnavailableError
from web_index.archive._collection import open_collections as open_collections
from web_index.archive._collection_config import load_collections as load_collections
from web_index.archive._collection_config import parse_collections as parse_collections
from web_index.archive._export import ExportReport, export_warcs
from web_index.archive._export import Tally as Tally
from web_index.archive._http import ARCHIVED_CONTENT_POLICY as ARCHIVED_CONTENT_POLICY
from web_index.archive._http import ARCHIVED_PREFIX as ARCHIVED_PREFIX
from web_index.archive._http import HOP_BY_HOP as HOP_BY_HOP
from web_index.archive._http import collection_sources as collection_sources
from web_index.archive._http import content_policy as content_policy
from web_index.archive._http import inert as inert
from web_index.archive._http import served_name as served_name
from web_index.archive._http import wire_headers as wire_headers
from web_index.archive._import import ImportReport, import_warcs
from web_index.archive._ranges import Ranged as Ranged
from web_index.archive._ranges import ranged as ranged
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.archive._sources import wacz_files as wacz_files
from web_index.archive._wacz import WaczReport, export_wacz
from web_index.archive._wacz_import import import_wacz
from web_index.archive._warc_read import WARC_SUFFIXES as WARC_SUFFIXES
from web_index.archive._warc_read import WarcRecord, read_warc
from web_index.archive._warc_write import capture_ident as capture_ident
from web_index.archive._warc_write import record_id as record_id
from web_index.archive._warc_write import response_record as response_record

__all__ = [
    "ArchiveFile",
    "ExportReport",
    "ImportReport",
    "WaczReport",
    "WarcRecord",
    "archive_files",
    "export_wacz",
    "export_warcs",
    "import_wacz",
    "import_warcs",
    "read_arc",
    "read_warc",
]
