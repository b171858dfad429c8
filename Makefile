# TileRosetta. `make test` and `make bench` set everything up from a fresh clone first.
SHELL := /bin/bash
PY := .venv/bin/python
TR := $(PY) -m tilerosetta
# For targets that need no build (report, doctor, bench without a GPU): the package from the source tree, so
# they work right after `make setup`; native modules, once built, are found in the venv as usual.
TR_SRC := PYTHONPATH=$(CURDIR)/python$${PYTHONPATH:+:$$PYTHONPATH} $(TR)
GEN := PYTHONPATH=$(CURDIR)/python$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m tilerosetta.codegen
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (auto = one per core; 0 = in this process). --dist loadgroup keeps each
# backend x op in one worker (shared_tests/conftest.py says why).
PYTEST_WORKERS ?= auto

.PHONY: setup generate check-generated build-all build-python build-cpp build-rust build-julia test test-native list doctor bench report gpu-bundle clean

setup:
	@tools/setup.sh

# The native op tables (cpp/generated/, rust/src/generated.rs, rust/src/ops/generated_ops.rs, julia/src/generated.jl)
# come from the specs:
# `make generate` rewrites them after a spec changes; every build first checks that they are current.
generate:
	@$(GEN)

check-generated: setup
	@$(GEN) --check

# Every language's build; ends with one line per language (built / skipped because / FAILED because) and
# fails if a language that can be built here did not build.
build-all: setup check-generated
	@tools/build-all.sh
	@$(TR) list

build-python: setup check-generated
	@tools/build-python.sh

build-cpp: build-python
	@tools/build-cpp.sh

build-rust: setup check-generated
	@tools/build-rust.sh

build-julia: setup check-generated
	@tools/build-julia.sh

# Each language's own native tests (cargo test, ...), then the conformance suite (GPU cases skip with their
# reason when there is no GPU, and the reasons are counted at the end). The suite runs last so its summary
# closes the output.
test: build-all
	@$(MAKE) --no-print-directory test-native
	@$(TR) test -- -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-native:
	@for t in tools/test-*.sh; do [ -x "$$t" ] && { echo "== $$t"; "$$t" || exit 1; }; done; true

list: build-all
doctor: setup
	@$(TR_SRC) doctor

# Without a GPU there is nothing to time: say so before building anything and render the committed H200 run.
bench: setup
	@if $(PY) -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then \
	  $(MAKE) --no-print-directory build-all && $(TR) bench; \
	else \
	  echo "make bench: no CUDA GPU on this machine, so nothing is timed or built; rendering the newest committed H200 run instead."; \
	  $(TR_SRC) report bench/results/latest --print; \
	fi

# The newest committed GPU run (CPU-only and fixture files are never "latest").
report: setup
	@$(TR_SRC) report bench/results/latest --scaling bench/results

# gpu-bundle/ (ours: its own sm_90 C++ extension and the Rust wheel, not the 4-arch build of build-all, ~60 MiB)
# and gpu-peers/ (the optional peers' runtime in <= 38 MiB parts; PEERS=0 skips it)
gpu-bundle: setup build-rust
	@tools/gpu-bundle.sh
	@tools/peers-bundle.sh

clean:
	rm -rf build dist gpu-bundle gpu-peers rust/target
