# TileRosetta. `make test` and `make bench` set everything up from a fresh clone first.
SHELL := /bin/bash
PY := .venv/bin/python
TR := $(PY) -m tilerosetta
PYTEST_ARGS ?=

.PHONY: setup build-all build-python build-cpp build-rust build-julia test test-native list doctor bench report gpu-bundle clean

setup:
	@tools/setup.sh

# Build every backend that can build here; each step says what it skipped and why.
build-all: setup build-python build-cpp build-rust build-julia
	@$(TR) list

build-python: setup
	@$(PY) -m pip install -q --no-build-isolation -e . && echo "build-python: tilerosetta installed (editable; tile_cpp built if its toolchain is found)"

build-cpp: build-python
	@if [ -x tools/build-cpp.sh ]; then tools/build-cpp.sh; else echo "build-cpp: skipped (cpp/ has no backend yet)"; fi

build-rust: setup
	@if [ -x tools/build-rust.sh ]; then tools/build-rust.sh; else echo "build-rust: skipped (rust/ has no backend yet)"; fi

build-julia: setup
	@if [ -x tools/build-julia.sh ]; then tools/build-julia.sh; else echo "build-julia: skipped (julia/ has no backend yet)"; fi

# Each language's own native tests (cargo test, ...), then the conformance suite (GPU cases skip with their
# reason when there is no GPU). The suite runs last so its summary closes the output.
test: build-all
	@$(MAKE) --no-print-directory test-native
	@$(TR) test -- $(PYTEST_ARGS)

test-native:
	@for t in tools/test-*.sh; do [ -x "$$t" ] && { echo "== $$t"; "$$t" || exit 1; }; done; true

list: build-all
doctor: setup
	@$(TR) doctor

bench: build-all
	@$(TR) bench

report:
	@$(TR) report bench/results/latest

# gpu-bundle/ (ours, ~60 MiB) and gpu-peers/ (the optional peers' runtime in <= 38 MiB parts; PEERS=0 skips it)
gpu-bundle: build-all
	@tools/gpu-bundle.sh
	@tools/peers-bundle.sh

clean:
	rm -rf build dist gpu-bundle gpu-peers rust/target
