# dtcc entry points. `make test` and `make demo` install what is missing
# (Debian packages, by name), configure, build and run.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PYTHON := /usr/bin/python3

.PHONY: all setup configure build test unit lit conformance shard-conformance demo fuzz clean

all: build

setup:
	@./scripts/setup.sh

$(BUILD_DIR)/build.ninja:
	@./scripts/setup.sh
	cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
	  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache \
	  -DLLVM_USE_LINKER=lld \
	  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	  $(CMAKE_FLAGS)

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	ninja -C $(BUILD_DIR) -j$(JOBS)

# Every test: GoogleTest, lit, ONNX node conformance, end-to-end.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS) -L unit

lit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L lit

# ONNX's own node tests through import -> compile -> run, and their gradients
# against finite differences. The floors are the expected-pass lists in
# tests/conformance/ (see run_onnx_node_tests.py --help).
conformance: build
	$(PYTHON) tests/conformance/run_onnx_node_tests.py --dtcc $(BUILD_DIR)/bin/dtcc \
	  --suite all --jobs $(JOBS)
	$(PYTHON) tests/conformance/run_onnx_node_tests.py --dtcc $(BUILD_DIR)/bin/dtcc \
	  --suite all --jobs $(JOBS) --data tests/conformance/newer_ops \
	  --expected-node tests/conformance/expected_pass_newer_node.txt \
	  --expected-grad tests/conformance/expected_pass_newer_grad.txt
	@$(MAKE) --no-print-directory shard-conformance

# Every dgraph op under every sharding its rule allows, on 2 and 4 ranks
# against one device: forward results and gradients (tests/shardconf).
shard-conformance: build
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BUILD_DIR)/bin/DtccShardConformance \
	  --min-passed 1071

# libFuzzer on every parser of outside input (tests/fuzz/README.md), each
# target FUZZ_SECONDS (600 by default); FUZZ_TARGETS picks some of them.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?=
fuzz: setup
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DLLVM_USE_LINKER=lld \
	  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	  -DDTCC_ENABLE_CUDA=OFF -DDTCC_ENABLE_FUZZERS=ON
	ninja -C $(FUZZ_DIR) -j$(JOBS) dtcc-fuzzers
	./scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

demo: build
	./scripts/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
