from web_index._version import __version__
