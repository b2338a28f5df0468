# kafka-audit: `make help` lists the targets. Every target sets up what it needs first.
SHELL := /bin/bash
# Independent steps run side by side, so that set-up keeps both cores busy: the venv's install beside the Maven
# downloads and the Debian packages, lint beside the class archives, the two archives beside each other. The
# Maven steps stay one after another: they share one local repository, which Maven 3.8 does not lock between
# processes, and the two the demo needs (Kafka's, Spark's) end well before the venv's install does.
MAKEFLAGS += --jobs=3
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAUDIT := $(VENV)/bin/kaudit
KAUDIT_CACHE_DIR ?= $(HOME)/.cache/kafka-audit
JARS := $(KAUDIT_CACHE_DIR)/jars
# Each jar set's marker is named by a hash of its pom, so only a change to the pom's content fetches the jars
# again, not a checkout that gives the pom a newer time: the jars sit in a cache that checkouts share, and the
# JVM takes a class archive as stale when its jars' times change.
jars_done = $(JARS)/$(1)/.done-$(shell sha256sum jvm/$(1)/pom.xml | cut -c1-16)
KAFKA_JARS := $(call jars_done,kafka)
SPARK_JARS := $(call jars_done,spark)
MIRRORMAKER_JARS := $(call jars_done,mirrormaker)
# The Spark packages as Maven fetched them, before the jars pyspark ships are pruned (which needs the venv).
SPARK_FETCHED := $(JARS)/spark/.fetched-$(shell sha256sum jvm/spark/pom.xml | cut -c1-16)
NATIVE := build/native/.done
MVN := mvn -q -B -Dmaven.repo.local=$(KAUDIT_CACHE_DIR)/m2
# Each set-up step says when it starts and how many seconds it took: $(call began,NAME,what it does) first in
# its recipe, $(call ended,NAME) last. $(QUIET) NAME CMD keeps a chatty command's output in build/steps/NAME.log,
# shown only when it fails.
began = @.ci/step begin $(1) "$(2)"
ended = @.ci/step end $(1)
QUIET := .ci/step quiet
# SeaweedFS, the S3-compatible store the tests keep Delta tables in (audit/local/object_store.py pins the version;
# this reads it there). Named by its version, so only a new pin builds again.
WEED_VERSION := $(shell sed -n 's/^WEED_VERSION = "\(.*\)"$$/\1/p' audit/local/object_store.py)
WEED := $(KAUDIT_CACHE_DIR)/bin/weed-$(WEED_VERSION)
GO ?= go
PYTEST_ARGS ?=
# Test processes of `make test`: much of the suite waits on brokers, timeouts and subprocesses, so a third
# worker runs tests while the other two wait, even on two cores. One test at a time per worker, in the order
# tests/conftest.py gives (slow tests first, then Spark modules alternating with Kafka ones). TEST_WORKERS=0
# runs the suite in this process.
TEST_WORKERS ?= 3
FUZZ_SECONDS ?= 60
SOAK_MINUTES ?= 10
FUZZ_TARGETS := record settings headers

export KAUDIT_CACHE_DIR
# Spark's Python workers must use the venv's interpreter, not whatever python is on PATH.
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: setup
setup: demo-setup $(MIRRORMAKER_JARS) $(WEED) class-archives debian-packages ## venv + package + native plugin + Kafka, Spark (with S3A) and MirrorMaker 2 jars + their class archives + SeaweedFS + Debian packages (idempotent, offline once cached)

# What `kaudit demo` runs on, and no more: the venv, the plugin its producers and counters load, the brokers' jars
# and the Spark packages of the lake job and the books. Its JVMs start without class archives until they are
# recorded (see `demo`), and it needs neither SeaweedFS, MirrorMaker, the interceptor nor Chromium.
.PHONY: demo-setup
demo-setup: $(VENV)/.installed $(NATIVE) $(KAFKA_JARS) $(SPARK_JARS) ## only what `make demo` needs: venv, native plugin, Kafka and Spark jars

# pyproject.toml states the ranges the code accepts; constraints.txt pins, within them, the version of every
# package the venv holds (pip and setuptools too), so a fresh machine installs the versions the tests ran with
# rather than whatever is newest that day. A venv that holds other versions is brought to the pinned ones.
LOCK := constraints.txt

# Most of the install is pyspark: PyPI has it only as a 450 MB source archive, which pip downloads and then packs
# into a wheel. So it is installed beside the rest: one pip installs every other pinned package (--no-deps: the
# pins are the whole venv), another builds and installs pyspark's wheel; the last step installs this package and
# checks every requirement against the pins. Disjoint packages: the two never write the same file. --no-compile:
# Python compiles a module when it is first imported, rather than pip every module of every package up front.
PYSPARK_PIN := $(shell grep -m1 '^pyspark==' $(LOCK))
$(VENV)/.pip: $(LOCK)
	$(call began,venv-pip,venv: created + its pip)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade -c $(LOCK) pip
	@touch $@
	$(call ended,venv-pip)

$(VENV)/.pinned: $(LOCK) | $(VENV)/.pip
	$(call began,venv-pins,venv: the pinned packages but pyspark)
	@grep -v '^pyspark==' $(LOCK) > $(VENV)/pins.txt
	@$(QUIET) venv-pins $(PY) -m pip install --no-deps --no-compile -r $(VENV)/pins.txt
	@touch $@
	$(call ended,venv-pins)

$(VENV)/.pyspark: $(LOCK) | $(VENV)/.pip
	$(call began,pyspark,venv: $(PYSPARK_PIN) downloaded and packed into a wheel)
	@$(PY) -m pip show pyspark 2>/dev/null | grep -qx 'Version: $(subst pyspark==,,$(PYSPARK_PIN))' || \
	  $(QUIET) pyspark $(PY) -m pip install --no-deps --no-compile '$(PYSPARK_PIN)'
	@touch $@
	$(call ended,pyspark)

$(VENV)/.installed: pyproject.toml $(LOCK) $(VENV)/.pinned $(VENV)/.pyspark
	$(call began,venv,venv: pip install -e '.[dev]' on the pinned packages)
	@$(QUIET) venv $(PY) -m pip install -c $(LOCK) -e '.[dev]' || \
	  { echo "pip could not install from $(LOCK): if it names conflicting requirements, pyproject.toml asks for versions $(LOCK) does not pin, and \`make lock\` renews it"; exit 1; }
	@touch $@
	$(call ended,venv)

# The pins come from a fresh resolve of pyproject.toml's ranges alone, installed in a scratch venv with this
# machine's $(PYTHON) (the interpreter decides which versions fit, so the file names it), then frozen.
.PHONY: lock
lock: ## resolve pyproject.toml's ranges afresh in a scratch venv and pin the result in constraints.txt
	@set -euo pipefail; scratch=$$(mktemp -d); trap 'rm -rf "$$scratch"' EXIT; \
	  $(PYTHON) -m venv "$$scratch/venv"; \
	  "$$scratch/venv/bin/python" -m pip install -q --upgrade pip; \
	  "$$scratch/venv/bin/python" -m pip install -q -e '.[dev]'; \
	  { echo "# The versions \`make setup\` installs (pip install -c $(LOCK)): the ones the tests run with. \`make lock\`"; \
	    echo "# renews them from a fresh resolve of pyproject.toml's ranges (Python $$("$$scratch/venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')); change the ranges there, not here."; \
	    "$$scratch/venv/bin/python" -m pip freeze --all --exclude-editable | grep -viE '^kafka-audit(==| @ )'; \
	  } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
	@echo "$(LOCK): $$(grep -c '==' $(LOCK)) packages pinned; the next make installs them"

# The librdkafka plugin (native/plugin/) the audited producers and the counter count with, compiled against Debian's
# librdkafka-dev headers with the system C compiler; rebuilt when its source or a module its constants come from changes.
$(NATIVE): $(wildcard native/plugin/*.c native/plugin/*.h) native/audit_window.h native/build.py $(addprefix audit/contract/,audit_time.py digest.py names.py record.py tally.py windows.py) audit/io/plugin.py | $(VENV)/.installed plugin-headers
	$(call began,native,librdkafka plugin: compile)
	@$(PY) native/build.py
	@mkdir -p $(dir $@) && touch $@
	$(call ended,native)

.PHONY: native
native: $(NATIVE) ## build the librdkafka plugin the audited producers and the counter count with (part of setup; cached until its source changes)

$(KAFKA_JARS):
	$(call began,kafka-jars,Kafka broker jars: Maven Central)
	@rm -rf $(JARS)/kafka
	@$(QUIET) kafka-jars $(MVN) -f jvm/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/kafka
	@touch $@
	$(call ended,kafka-jars)

# MirrorMaker 2, only for the replicator benchmark (bench/bench_mirror.py).
$(MIRRORMAKER_JARS): | $(SPARK_FETCHED)
	$(call began,mirrormaker-jars,MirrorMaker 2 jars: Maven Central)
	@rm -rf $(JARS)/mirrormaker
	@$(QUIET) mirrormaker-jars $(MVN) -f jvm/mirrormaker/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/mirrormaker
	@touch $@
	$(call ended,mirrormaker-jars)

# The Java producer interceptor (jvm/interceptor), built from source into $(JARS)/interceptor, with Kafka's kafka-tools
# jar (ProducerPerformance, for its test and benchmark) in tools/ beside it, an untested kafka-clients in
# old-clients/ (for the test that it refuses to load there), and in streams/ a tiny Kafka Streams application
# (jvm/interceptor/streams) with kafka-streams and its runtime jars (for its exactly-once test). Its marker is named by
# a hash of the poms and the sources (resources too), so only a change to them builds it again; after the other Maven
# steps, which share the repository.
INTERCEPTOR_JAR := $(JARS)/interceptor/.done-$(shell cat jvm/interceptor/pom.xml jvm/interceptor/streams/pom.xml $$(find jvm/interceptor/src jvm/interceptor/streams/src -type f | LC_ALL=C sort) | sha256sum | cut -c1-16)
$(INTERCEPTOR_JAR): | $(MIRRORMAKER_JARS)
	$(call began,interceptor,Java interceptor + Kafka Streams module: Maven build)
	@rm -rf $(JARS)/interceptor
	@$(QUIET) interceptor $(MVN) -f jvm/interceptor/pom.xml package -Dkaudit.build.dir=$(JARS)/interceptor/build -Dkaudit.tools.dir=$(JARS)/interceptor/tools \
		-Dkaudit.old.clients.dir=$(JARS)/interceptor/old-clients
	@mv $(JARS)/interceptor/build/kafka-audit-interceptor.jar $(JARS)/interceptor/ && rm -rf $(JARS)/interceptor/build
	@$(QUIET) interceptor-streams $(MVN) -f jvm/interceptor/streams/pom.xml package dependency:copy-dependencies -DincludeScope=runtime \
		-Dkaudit.build.dir=$(JARS)/interceptor/streams-build -DoutputDirectory=$(JARS)/interceptor/streams
	@mv $(JARS)/interceptor/streams-build/kafka-audit-streams-copy.jar $(JARS)/interceptor/streams/ && rm -rf $(JARS)/interceptor/streams-build
	@touch $@
	$(call ended,interceptor)

.PHONY: interceptor
interceptor: $(INTERCEPTOR_JAR) ## build the Java producer interceptor jar io.kaudit.KafkaAuditInterceptor (part of setup; cached until its source changes)
setup: $(INTERCEPTOR_JAR)

# Maven fetches the Spark packages beside the venv's install; only pruning the jars pyspark ships waits for it.
# Jars a cache already holds pruned are kept as they are (a fetch would give them new times, and their class
# archive would be recorded again): the fetch marker then takes the prune marker's time.
$(SPARK_FETCHED): | $(KAFKA_JARS)
	$(call began,spark-jars,Spark packages (Delta + Kafka source + S3A): Maven Central)
	@if [ -f $(SPARK_JARS) ]; then touch -r $(SPARK_JARS) $@; else \
	  rm -rf $(JARS)/spark && \
	  $(QUIET) spark-jars $(MVN) -f jvm/spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(JARS)/spark && \
	  touch $@; fi
	$(call ended,spark-jars)

$(SPARK_JARS): $(SPARK_FETCHED) | $(VENV)/.installed
	$(call began,spark-prune,Spark packages: the jars pyspark ships removed)
	@$(QUIET) spark-prune $(PY) -m audit.io.jvm prune-provided $(JARS)/spark
	@touch $@
	$(call ended,spark-prune)

# SeaweedFS from source, built beside the venv's install and the Maven steps (it needs neither). Its go.mod has
# replace directives, so `go install ...@version` refuses it: the module is downloaded into Go's module cache and
# built there. -buildvcs=false: a module cache inside a git checkout would otherwise stamp (or fail on) that
# checkout's state; -s -w leave out the debug symbols (a third of the binary). Download and build go to $(WEED).log;
# the binary appears only when the build succeeded.
$(WEED):
	@command -v $(GO) >/dev/null || { echo "SeaweedFS is built with Go: install Go 1.26.6 or later (its go.mod asks for it) or set GO=/path/to/go"; exit 1; }
	@test -n "$(WEED_VERSION)" || { echo "no WEED_VERSION in audit/local/object_store.py"; exit 1; }
	mkdir -p $(dir $@)
	$(call began,weed,SeaweedFS $(WEED_VERSION): Go build from source (log in $@.log))
	@{ set -euo pipefail; time { \
	    module=$$($(GO) mod download -json github.com/seaweedfs/seaweedfs@$(WEED_VERSION)) || { echo "$$module"; exit 1; }; \
	    echo "$$module"; dir=$$(echo "$$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	    cd "$$dir" && GOFLAGS=-buildvcs=false $(GO) build -v -ldflags='-s -w' -o $@.tmp ./weed; }; } >$@.log 2>&1 \
	  || { tail -30 $@.log; rm -f $@.tmp; exit 1; }
	@mv $@.tmp $@
	$(call ended,weed)

.PHONY: weed
weed: $(WEED) ## build SeaweedFS, the tests' S3-compatible object store, from source with Go (part of setup; once per pinned version)

# The class-data archives the brokers and Spark drivers start from (audit/local/class_archives.py): recorded
# once for this Java, venv and jar set; a later run finds them and does nothing.
.PHONY: class-archives
class-archives: kafka-class-archive spark-class-archive ## record the class archives brokers and Spark drivers start faster from (part of setup)

.PHONY: kafka-class-archive spark-class-archive
kafka-class-archive: $(VENV)/.installed $(KAFKA_JARS)
	$(call began,kafka-archive,class archive of the Kafka jars: a broker's start recorded)
	@$(QUIET) kafka-archive $(call record_archive,kafka)
	$(call ended,kafka-archive)

spark-class-archive: $(VENV)/.installed $(SPARK_JARS)
	$(call began,spark-archive,class archive of the Spark jars: a Spark driver's run recorded)
	@$(QUIET) spark-archive $(call record_archive,spark)
	$(call ended,spark-archive)

# One recording of a set at a time (`make demo` starts one in the background): a second waits, then finds it done.
record_archive = flock $(KAUDIT_CACHE_DIR)/.class-archive-$(1).lock $(PY) -m audit.local.class_archives --cache-dir $(KAUDIT_CACHE_DIR) $(1)

# Debian packages, installed only when missing: librdkafka's headers the plugin is built against, xxHash's header
# it compiles in (the content digest), Chromium and its chromedriver for the UI's browser tests and screenshots,
# kcat as a Kafka client kafka-audit did not write.
# The plugin (and so the demo) needs only the two headers; the rest is for the tests.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL = $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq
.PHONY: debian-packages plugin-headers
debian-packages: plugin-headers ## librdkafka-dev and libxxhash-dev (the plugin's headers), headless Chromium + chromedriver and kcat (Debian packages)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v kcat >/dev/null || \
	  { .ci/step begin debian "Debian packages: chromium, chromium-driver, kcat" && \
	    $(APT_INSTALL) chromium chromium-driver kcat && .ci/step end debian; }

plugin-headers:
	@test -f /usr/include/librdkafka/rdkafka.h && test -f /usr/include/xxhash.h || \
	  { .ci/step begin headers "Debian packages: librdkafka-dev, libxxhash-dev" && \
	    $(APT_INSTALL) librdkafka-dev libxxhash-dev && .ci/step end headers; }

.PHONY: lint
lint: $(VENV)/.installed ## ruff (lint + format check) over the tree, mypy on the contract and the hops
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

.PHONY: test
test: setup lint ## lint, then the whole test suite on TEST_WORKERS processes (starts real Kafka clusters and Spark on loopback)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1 $(PYTEST_ARGS)

# The fast tests are CPU-bound (property tests, parsers): one worker per core.
FAST_WORKERS ?= $(shell nproc)
FAST_TESTS := not kafka and not spark and not object_store and not browser and not jvm and not open_bug
.PHONY: test-fast
test-fast: $(VENV)/.installed $(NATIVE) ## the tests that need no broker, Spark, object store, browser or built jar: pure logic, property tests, CLI errors (under 2 minutes)
	$(VENV)/bin/pytest -n $(FAST_WORKERS) -m "$(FAST_TESTS)" $(PYTEST_ARGS)

.PHONY: test-open-bugs
test-open-bugs: setup ## run only the tests that expose known open bugs (marked open_bug; see docs/testing.md)
	$(VENV)/bin/pytest -m open_bug $(PYTEST_ARGS)

.PHONY: fuzz
fuzz: setup ## coverage-guided fuzzing (atheris) of the record parser, config loader, header readers: FUZZ_SECONDS each (60)
	@for target in $(FUZZ_TARGETS); do \
	  mkdir -p .kaudit/fuzz/$$target && echo "fuzzing $$target for $(FUZZ_SECONDS) s" && \
	  (cd .kaudit/fuzz && $(abspath $(PY)) $(abspath fuzz/fuzz_inputs.py) --target $$target $$target \
	     $(abspath fuzz/seeds)/$$target -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 \
	     > $$target.log 2>&1) || { tail -40 .kaudit/fuzz/$$target.log; echo "fuzz $$target: finding in .kaudit/fuzz"; exit 1; }; \
	  grep -E "^(Done|stat::number_of_executed_units)" .kaudit/fuzz/$$target.log | head -1; \
	done

.PHONY: soak
soak: setup ## fault-injection soak on its own local clusters: SOAK_MINUTES of load (10) with random kills, then every invariant checked
	$(KAUDIT) soak --minutes $(SOAK_MINUTES)

.PHONY: demo
# The demo does not wait for the class archives (minutes on Java 25): they are recorded beside it at the lowest
# priority, so its own JVMs keep the CPU and the next demo's start from them.
demo: demo-setup ## run the pipeline on the embedded local default (sets up only what it runs on)
	@mkdir -p build/steps && { nice -n 19 $(call record_archive,kafka) && nice -n 19 $(call record_archive,spark); } \
	  >build/steps/demo-class-archives.log 2>&1 &
	$(KAUDIT) demo

.PHONY: ui
ui: setup ## serve the audit UI on http://127.0.0.1:8050 (over the lake; `kaudit ui --sample` for sample tables)
	$(KAUDIT) ui

NOTEBOOK ?= notebooks/completeness.ipynb
.PHONY: notebook
notebook: setup ## run the analyst notebook against the lake (KAUDIT_LAKE_PATH, else the config's); executed copy in .kaudit/notebooks
	$(PY) notebooks/execute.py $(NOTEBOOK) .kaudit/notebooks/$(notdir $(NOTEBOOK))

.PHONY: screenshots
screenshots: setup ## regenerate docs/img/ui-*.png from the sample tables in headless Chromium
	$(PY) -m dashboards.screenshots docs/img

.PHONY: up
up: demo-setup ## start the local Kafka clusters of the default config
	$(KAUDIT) clusters up

.PHONY: down
down: ## stop everything the demo or `make up` started
	-test -x $(KAUDIT) && $(KAUDIT) clusters down

.PHONY: clean
clean: down ## remove the local state (clusters, tables); keeps the download cache
	rm -rf .kaudit
