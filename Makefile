# Meridian: every entry point. The first target that needs .venv builds it.
PYTHON ?= python3
FLEET ?= fleet.yaml
BIN := .venv/bin
ENV := .venv/.installed
COMPONENTS := $(wildcard platform/*/pyproject.toml)

.PHONY: setup plan test lint typecheck unit lock clean

$(ENV): requirements/dev.lock scripts/bootstrap.sh $(COMPONENTS)
	@bash scripts/bootstrap.sh $(PYTHON)

setup: $(ENV) ## build .venv from the lock

plan: $(ENV) ## validate FLEET, plan address ranges, print the fleet summary
	@$(BIN)/meridian plan --fleet $(FLEET)

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
	rm -rf .venv .mypy_cache .ruff_cache .hypothesis
