# Meridian: every entry point. The first target that needs .venv builds it.
PYTHON ?= python3
FLEET ?= fleet.yaml
SYNTH_OUT ?= infra/cdktf.out
BIN := .venv/bin
ENV := .venv/.installed
COMPONENTS := $(wildcard platform/*/pyproject.toml)

.PHONY: setup plan generate review scan bench test lint typecheck unit lock clean

# The project's own tools (node, npm, cdktn, kubectl, checkov) come first, and
# the CDK Terrain CLI asks no update server.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export CHECKPOINT_DISABLE := 1

$(ENV): requirements/dev.lock requirements/torch.txt requirements/checkov.lock infra/package-lock.json infra/pyproject.toml scripts/bootstrap.sh $(COMPONENTS)
	@bash scripts/bootstrap.sh $(PYTHON)

setup: $(ENV) ## build .venv from the lock

plan: $(ENV) ## validate FLEET, plan address ranges, synthesize every stack, print both summaries
	@$(BIN)/meridian plan --objects --fleet $(FLEET)
	@echo
	@$(BIN)/meridian-synth --fleet $(FLEET) --outdir $(SYNTH_OUT)

generate: $(ENV) ## render kustomize/overlays/ and argocd/clusters/ from FLEET
	@$(BIN)/meridian generate --fleet $(FLEET)

BASE ?= origin/main
review: $(ENV) ## plan review of HEAD against BASE: review.md, exit 3 when destructive
	@$(BIN)/python scripts/review.py --base $(BASE) --out review.md

scan: plan ## checkov over the stacks `make plan` synthesized (make test scans its own synth)
	$(BIN)/checkov --config-file infra/checkov.yaml -d $(SYNTH_OUT)/stacks

bench: $(ENV) ## every benchmark: synthesis (1/3/8 regions), gkr start-up, Warden decisions, trainer, hostile input
	$(BIN)/python scripts/bench_synth.py
	$(BIN)/python scripts/bench_gkr.py
	$(BIN)/python scripts/bench_warden.py
	$(BIN)/python scripts/bench_trainer.py
	$(BIN)/python scripts/bench_faults.py

test: lint typecheck unit ## everything CI runs

lint: $(ENV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(ENV)
	$(BIN)/mypy

unit: $(ENV)
	$(BIN)/pytest

lock: ## re-resolve requirements/dev.in into the lock
	bash scripts/lock.sh $(PYTHON)

clean:
	rm -rf .venv .mypy_cache .ruff_cache .hypothesis infra/node_modules infra/cdktf.out
