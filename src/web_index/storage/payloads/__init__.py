"""Identical payloads stored once: what a compacted file writes as a reference
to a payload its domain already stores (``_sharing``: the search by digest, the
rows made references), and how a reference is named and resolved when read
(``_refs``: the holder found by its sort key, its body checked against both
rows' digests; the holder's place for a capture line), and the payloads a bulk
load is told of rather than given (``_pending``). Nothing here is public
(``__all__`` is empty): the names imported ``as`` themselves are the internal
API of the rest of storage.
"""

from web_index.storage.payloads._pending import HOLDER_COLUMNS as HOLDER_COLUMNS
from web_index.storage.payloads._pending import PENDING as PENDING
from web_index.storage.payloads._pending import Values as Values
from web_index.storage.payloads._pending import fill_pending as fill_pending
from web_index.storage.payloads._pending import holder_values as holder_values
from web_index.storage.payloads._pending import pending_holders as pending_holders
from web_index.storage.payloads._refs import Holder as Holder
from web_index.storage.payloads._refs import Wanted as Wanted
from web_index.storage.payloads._refs import holder_places as holder_places
from web_index.storage.payloads._refs import holder_ref as holder_ref
from web_index.storage.payloads._refs import parse_ref as parse_ref
from web_index.storage.payloads._refs import read_payloads as read_payloads
from web_index.storage.payloads._refs import resolve_rows as resolve_rows
from web_index.storage.payloads._refs import resolve_table as resolve_table
from web_index.storage.payloads._sharing import MIN_SHARED_BYTES as MIN_SHARED_BYTES
from web_index.storage.payloads._sharing import find_holders as find_holders
from web_index.storage.payloads._sharing import part_digests as part_digests
from web_index.storage.payloads._sharing import share_payloads as share_payloads
from web_index.storage.payloads._sharing import wanted_payloads as wanted_payloads

__all__: list[str] = []
