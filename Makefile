# The two commands of the README, and what they need. Run as root on a fresh machine.
VENV   := .venv
BIN    := $(VENV)/bin
NODES  ?= 2

.PHONY: demo test lint lab-up lab-down bench

# the project's Python environment, remade when a pyproject.toml changes: infergate itself
# and its lab (a distribution of its own, lab/), both editable, so the clone runs the installed
# form (the pytest plugin and the infergate command) on these very files
$(BIN)/.installed: pyproject.toml lab/pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]' -e ./lab
	touch $@

# The main job on the embedded default: bring the lab up with its engine (image and model on
# every node; the first time builds the image, about 6 minutes), prove the engine on one
# node (the ISA its kernels run on, its start-up time and tokens/s here), the preflight,
# then the launch and the smoke check: SmolLM2 with pipeline parallel 2 (real answers), then
# the tiny Qwen3-MoE with tensor parallel 2 across the two lab nodes. Each launch prints its
# milestones and is removed at the end; reports/<run id>/ keeps the reports and evidence.
demo: $(BIN)/.installed
	$(BIN)/python -m infergate_lab up -n $(NODES)
	$(BIN)/python -m infergate_lab engine --smoke
	$(BIN)/infergate preflight --inventory=inventories/lab.yaml
	$(BIN)/infergate deploy --inventory=inventories/lab.yaml
	$(BIN)/infergate deploy --inventory=inventories/lab-moe-tp2.yaml

# The project's own tests: lint, types, unit tests on recorded outputs, and runs of the
# real suite against the lab (which the tests bring up and take down themselves).
test: lint
	$(BIN)/pytest selftest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

lab-up: $(BIN)/.installed
	$(BIN)/python -m infergate_lab up -n $(NODES)

lab-down: $(BIN)/.installed
	$(BIN)/python -m infergate_lab down

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_preflight.py
	$(BIN)/python scripts/bench_model_hash.py
	$(BIN)/python scripts/bench_preflight_image.py
	$(BIN)/python scripts/bench_inference.py
	$(BIN)/python scripts/bench_watch.py
