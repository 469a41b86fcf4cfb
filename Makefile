# Every target bootstraps .venv from uv.lock first; a fresh machine needs only python3.
.PHONY: venv demo test lint bench bench-fetch clean

venv:
	./scripts/bootstrap.sh

demo: venv
	./scripts/demo.sh

test: venv
	./scripts/test.sh

lint: venv
	.venv/bin/ruff check src tests bench
	.venv/bin/mypy

bench: venv
	.venv/bin/python bench/store_bench.py

bench-fetch: venv
	.venv/bin/python bench/fetch_bench.py

clean:
	rm -rf .venv .tools demo-store
