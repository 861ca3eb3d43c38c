# verl-ascend: two commands.
#   make demo   train the embedded default (DAPO on a tiny Qwen2, on the CPU) end to end
#   make test   run the test suite (CPU; tests/npu through the NPU emulator)
# Both create .venv on first use: CPU torch 2.13.0 first, then this project with its test extra.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.verl-ascend-installed
PYTEST_ARGS ?=

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): setup.py requirements/base.txt requirements/test.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU torch first, pinned, so no resolver ever pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf outputs/dapo_tiny_cpu outputs/checkpoints/dapo_tiny_cpu
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/dapo_tiny_cpu.sh

# tests/npu runs in its own process: modules first imported while the NPU emulator is active
# keep upstream's import-time `is_npu_available=True`.
test: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q $(PYTEST_ARGS) tests --ignore=tests/npu
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q $(PYTEST_ARGS) tests/npu

clean:
	rm -rf outputs .pytest_cache
