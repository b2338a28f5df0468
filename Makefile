# kafka-audit: `make help` lists the targets. Every target sets up what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAUDIT := $(VENV)/bin/kaudit
KAUDIT_CACHE_DIR ?= $(HOME)/.cache/kafka-audit
JARS := $(KAUDIT_CACHE_DIR)/jars
MVN := mvn -q -B -Dmaven.repo.local=$(KAUDIT_CACHE_DIR)/m2
PYTEST_ARGS ?=

export KAUDIT_CACHE_DIR
# Spark's Python workers must use the venv's interpreter, not whatever python is on PATH.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: setup
setup: $(VENV)/.installed $(JARS)/kafka/.done $(JARS)/spark/.done $(JARS)/mirrormaker/.done ## venv + package + Kafka, Spark and MirrorMaker 2 jars (idempotent, offline once cached)

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(JARS)/kafka/.done: jvm/kafka/pom.xml
	rm -rf $(JARS)/kafka
	cd jvm/kafka && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/kafka
	touch $@

# MirrorMaker 2, only for the replicator benchmark (bench/bench_mirror.py).
$(JARS)/mirrormaker/.done: jvm/mirrormaker/pom.xml
	rm -rf $(JARS)/mirrormaker
	cd jvm/mirrormaker && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/mirrormaker
	touch $@

$(JARS)/spark/.done: jvm/spark/pom.xml $(VENV)/.installed
	rm -rf $(JARS)/spark
	cd jvm/spark && $(MVN) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/spark
	$(PY) -m audit.jvm prune-provided $(JARS)/spark
	touch $@

.PHONY: test
test: setup ## run the test suite (starts real Kafka clusters and Spark on loopback)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

.PHONY: demo
demo: setup ## run the pipeline on the embedded local default
	$(KAUDIT) demo

.PHONY: up
up: setup ## start the local Kafka clusters of the default config
	$(KAUDIT) clusters up

.PHONY: down
down: ## stop everything the demo or `make up` started
	-test -x $(KAUDIT) && $(KAUDIT) clusters down

.PHONY: clean
clean: down ## remove the local state (clusters, tables); keeps the download cache
	rm -rf .kaudit
