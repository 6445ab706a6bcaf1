# The two commands of the README, and what they need. Run as root on a fresh machine.
VENV   := .venv
BIN    := $(VENV)/bin
NODES  ?= 2

.PHONY: demo test lint lab-up lab-down bench

# the project's Python environment, remade when pyproject.toml changes
$(BIN)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The main job on the embedded default: bring the lab up with its engine (image and model on
# every node; the first time builds the image, about 6 minutes), then the preflight.
demo: $(BIN)/.installed
	$(BIN)/python -m infergate.lab up -n $(NODES)
	$(BIN)/python -m infergate.lab engine
	$(BIN)/pytest -m preflight -n auto

# The project's own tests: lint, types, unit tests on recorded outputs, and runs of the
# real suite against the lab (which the tests bring up and take down themselves).
test: lint
	$(BIN)/pytest selftest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

lab-up: $(BIN)/.installed
	$(BIN)/python -m infergate.lab up -n $(NODES)

lab-down: $(BIN)/.installed
	$(BIN)/python -m infergate.lab down

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_preflight.py
	$(BIN)/python scripts/bench_model_hash.py
	$(BIN)/python scripts/bench_preflight_image.py
