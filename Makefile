# The two commands of the README, and what they need. Run as root on a fresh machine.
VENV   := .venv
BIN    := $(VENV)/bin
NODES  ?= 2

.PHONY: demo demo-sglang test lint lab-up lab-down bench bench-all

# the project's Python environment, remade when a pyproject.toml changes: infergate itself
# (with every extra) and its lab (a distribution of its own, lab/), both editable, so the
# clone runs the installed form (the pytest plugin and the infergate command) on these very
# files. Cleared first: a distribution renamed or dropped (0.1.0's `infergate`) would stay
# beside its successor, with the same command and pytest plugin.
$(BIN)/.installed: pyproject.toml lab/pyproject.toml
	python3 -m venv --clear $(VENV)
	$(BIN)/pip install -q -e '.[dev]' -e ./lab
	if git rev-parse --git-dir >/dev/null 2>&1; then git config core.hooksPath .githooks; fi
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
	$(BIN)/infergate preflight --plan=inventories/lab.yaml
	$(BIN)/infergate deploy --plan=inventories/lab.yaml
	$(BIN)/infergate deploy --plan=inventories/lab-moe-tp2.yaml

# The same for SGLang (issue 17), kept out of `demo` for its time: the SGLang 0.5.23 CPU image
# (built the first time, about 7 minutes, then cached) beside the lab's vLLM one, whose step
# makes the models, then the preflight, the launch and the smoke check of the tiny Qwen3-MoE
# with tensor parallel 2 across the two lab nodes (inventories/lab-sglang.yaml); about 3.5
# minutes with both images cached.
demo-sglang: $(BIN)/.installed
	$(BIN)/python -m infergate_lab up -n $(NODES)
	$(BIN)/python -m infergate_lab engine
	$(BIN)/python -m infergate_lab engine --kind sglang
	$(BIN)/infergate preflight --plan=inventories/lab-sglang.yaml
	$(BIN)/infergate deploy --plan=inventories/lab-sglang.yaml

# The project's own tests in three parts, each timed: the lint (with types); the unit tests
# (recorded outputs, local servers: no lab), on two xdist workers; the runs of the real suite
# against the lab, which those tests bring up and take down themselves, in one process (one
# lab). Each pytest run lists its slowest tests. A failed lint stops here; a failed unit part
# still runs the lab's, and fails at the end.
SPLIT := $(VENV)/test-split.txt
PYTEST_TIMED := $(BIN)/pytest --durations=30
# $(call timed,PART,COMMAND): COMMAND, then PART's wall time (and FAILED with its exit
# status, pytest's 5 for "no tests collected" too) on a line of its own, kept in $(SPLIT)
timed = start=$$(date +%s); $(2); rc=$$?; \
	line="$(1) $$(( $$(date +%s) - start )) s$$([ $$rc -eq 0 ] || echo " FAILED (exit $$rc)")"; \
	echo "make test: $$line"; echo "$$line" >> $(SPLIT); test $$rc -eq 0

test: $(BIN)/.installed
	@rm -f $(SPLIT)
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,unit,$(PYTEST_TIMED) -n 2 selftest/unit) || true
	@$(call timed,lab,$(PYTEST_TIMED) selftest/lab) || true
	@echo "make test, wall time: $$(paste -sd , $(SPLIT) | sed 's/,/, /g')"
	@! grep -q FAILED $(SPLIT)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

lab-up: $(BIN)/.installed
	$(BIN)/python -m infergate_lab up -n $(NODES)

lab-down: $(BIN)/.installed
	$(BIN)/python -m infergate_lab down

# Issue 16's table: every figure measured in one run (scripts/bench.py: the preflight at 2
# and 16 nodes, the model hash against its limit, the fresh in-image probe against a bare
# import), each beside its goal, PASS or MISS; about 2.5 minutes on the lab with its engine.
# Then our load client against `vllm bench serve` on a loopback token server of a known
# schedule (scripts/bench_client.py: c = 1 to 1,024, 50 to 500 req/s; about 8 minutes).
bench: $(BIN)/.installed
	$(BIN)/python scripts/bench.py
	$(BIN)/python scripts/bench_client.py

# The table, then the benches that compare against something else and take long: our client
# against `vllm bench serve` (about 17 minutes), the launch watch's poll against its streams,
# and the preflight sharded over 2 and 4 workers against one process, to 244 sshd-only nodes
# (about 12 minutes). Kept out of `bench`, so the table fits one short hold of the shared lab.
bench-all: bench
	$(BIN)/python scripts/bench_inference.py
	$(BIN)/python scripts/bench_watch.py
	$(BIN)/python scripts/bench_shards.py
