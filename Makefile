# Meridian: every entry point. The first target that needs .venv builds it.
PYTHON ?= python3
FLEET ?= fleet.yaml
SYNTH_OUT ?= infra/cdktf.out
BIN := .venv/bin
ENV := .venv/.installed
COMPONENTS := $(wildcard platform/*/pyproject.toml)

.PHONY: help setup crds plan generate review scan bench test lint typecheck unit scenario live twin lock clean

# A bare `make` lists the targets; it builds nothing.
.DEFAULT_GOAL := help

# The project's own tools (node, npm, cdktn, kubectl, checkov, nca) come first, and
# the CDK Terrain CLI asks no update server.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CHECKPOINT_DISABLE := 1
# Bytecode caches on: where the environment sets PYTHONDONTWRITEBYTECODE (this machine does), every pytest worker
# and every process a live run starts compiled the project's modules and rewrote the tests' asserts from source
# again: 21 s of CPU to collect the fast tier against 11-12 s from the cache (issue 40). __pycache__ is ignored by git.
unexport PYTHONDONTWRITEBYTECODE

$(ENV): requirements/dev.lock requirements/torch.txt requirements/checkov.lock requirements/nca.lock infra/package-lock.json infra/pyproject.toml scripts/bootstrap.sh $(COMPONENTS)
	@bash scripts/bootstrap.sh $(PYTHON)

help: ## list every target with what it does
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(ENV) crds ## build .venv from the lock and get the pinned CRDs

# Validation's schemas: each pinned CRD checked against requirements/crds.lock.json where $$MERIDIAN_CRDS or
# ../shared/crds provides it, else downloaded into .cache/crds and checked (one line and exit 2 when it cannot be).
crds: $(ENV) ## check the pinned upstream CRDs, downloading into .cache/crds those this machine lacks
	@$(BIN)/python scripts/fetch_crds.py

plan: $(ENV) crds ## validate FLEET, plan address ranges, synthesize every stack, print both summaries
	@$(BIN)/meridian plan --objects --fleet $(FLEET)
	@echo
	@$(BIN)/meridian-synth --fleet $(FLEET) --outdir $(SYNTH_OUT)

generate: $(ENV) crds ## render kustomize/overlays/, argocd/clusters/ and generated/ (registry, schemas) from FLEET
	@$(BIN)/meridian generate --fleet $(FLEET)

BASE ?= origin/main
# make turns the tool's exit 3 (destructive) into its own 2: CI runs scripts/review.py itself.
review: $(ENV) crds ## plan review of HEAD against BASE: review.md; make reports "Error 3" when destructive
	@$(BIN)/python scripts/review.py --base $(BASE) --out review.md

scan: plan ## checkov over the stacks `make plan` synthesized (make test scans its own synth)
	$(BIN)/checkov --config-file infra/checkov.yaml -d $(SYNTH_OUT)/stacks

bench: $(ENV) ## every benchmark: synthesis (1/3/8 regions), gkr start-up, Warden decisions, trainer, cross-region link model, hostile input, fleet goodput model, RL weight sync
	$(BIN)/python scripts/bench_synth.py
	$(BIN)/python scripts/bench_gkr.py
	$(BIN)/python scripts/bench_warden.py
	$(BIN)/python scripts/bench_warden_starvation.py
	$(BIN)/python scripts/bench_trainer.py
	$(BIN)/python scripts/bench_cross_region.py
	$(BIN)/python scripts/bench_faults.py
	$(BIN)/python scripts/bench_goodput.py
	$(BIN)/python scripts/bench_rl_sync.py
	$(BIN)/python scripts/bench_cross_region_tls.py

test: lint typecheck unit scenario live ## everything CI runs: lint, types, then every tier of tests (README "Tests")

lint: $(ENV) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(ENV) ## mypy --strict
	$(BIN)/mypy

# The tiers (markers in pyproject.toml, checked by tests/test_tiers.py). Unit tests and scenarios run on two
# workers, a file per worker (--dist loadfile: a module's fixtures are built once). Live runs go two at a time (one
# run uses about one of two cores): a module per worker, and the modules whose runs would collide (a local Ray,
# fixed TLS ports) on one worker (--dist loadgroup; the groups are in tests/tiers.py).
PYTEST_PARALLEL := -n 2 --dist loadfile

unit: $(ENV) crds ## the fast tier: every test that is neither live nor a scenario (the alert rules need promtool)
	@command -v promtool >/dev/null || echo "make unit: alert rules not evaluated (tests/gitops/test_alert_rules.py skipped): promtool is absent; apt-get install prometheus"
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not live and not scenario and not twin"

scenario: $(ENV) crds ## the review's sandbox scenarios, make and CLI runs of the whole fleet, simulations
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "scenario and not twin"

live: $(ENV) crds ## training, RL and Ray runs, two at a time (runs that would collide on one worker)
	$(BIN)/pytest -n 2 --dist loadgroup -m "live and not twin"

twin: $(ENV) ## the cluster twin: build every image as a CPU twin with podman and run the rendered pods in it (platform/twin)
	@bash scripts/twin_setup.sh
	$(BIN)/meridian-twin build
	$(BIN)/pytest -m twin tests/twin

lock: ## re-resolve requirements/dev.in into the lock
	bash scripts/lock.sh $(PYTHON)

clean: ## remove .venv, caches, infra/node_modules and infra/cdktf.out
	rm -rf .venv .mypy_cache .ruff_cache .hypothesis infra/node_modules infra/cdktf.out
