# The whole interface a newcomer needs. See README.md.
BUILD_DIR    ?= build
ASAN_DIR     ?= build-asan
TSAN_DIR     ?= build-tsan
FUZZ_DIR     ?= build-fuzz
# The fuzz build needs clang (libFuzzer); without it `build` and `test` skip the fuzz targets.
CLANGXX      ?= $(shell command -v clang++-14 || command -v clang++)
# make test runs each fuzz target this long (19 targets, two at a time: about 2½ minutes on 2
# cores); make fuzz runs each FUZZ_SECONDS.
FUZZ_TEST_SECONDS ?= 15
FUZZ_SECONDS ?= 60
SOAK_SECONDS ?= 600
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=
LINT_BASE    ?= HEAD
DEPS_STAMP   := $(BUILD_DIR)/.deps-installed

.PHONY: build test unit asan tsan fuzz fuzz-build soak format lint deps clean serve test-blas-kernels

# install-deps is idempotent; the stamp skips even its quick check until the script changes.
$(DEPS_STAMP): scripts/install-deps
	bash scripts/install-deps
	@mkdir -p $(BUILD_DIR) && touch $@

deps: $(DEPS_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP)
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)
	@$(MAKE) --no-print-directory fuzz-build

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@if [ -n "$(CLANGXX)" ]; then \
	  cd $(FUZZ_DIR) && ctest --output-on-failure -j $(JOBS) -L fuzz && cd .. && \
	  scripts/run-fuzzers $(FUZZ_DIR) $(FUZZ_TEST_SECONDS) $(JOBS); \
	else echo "test: no clang, the fuzz targets were not run"; fi

# The libFuzzer targets (tests/fuzz), in their own build dir: clang, libFuzzer + ASan + UBSan.
$(FUZZ_DIR)/build.ninja: $(DEPS_STAMP)
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNI_FUZZ=ON -DOMNI_CUDA=OFF \
	  -DCMAKE_CXX_COMPILER=$(CLANGXX) $(CMAKE_FLAGS)

fuzz-build:
	@if [ -z "$(CLANGXX)" ]; then echo "fuzz-build: no clang++ (scripts/install-deps installs clang-14); skipped"; \
	else $(MAKE) --no-print-directory $(FUZZ_DIR)/build.ninja && cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers; fi

# Every fuzz target for FUZZ_SECONDS, with the executions of each (docs/reliability.md).
fuzz: fuzz-build
	cd $(FUZZ_DIR) && ctest --output-on-failure -j $(JOBS) -L fuzz
	scripts/run-fuzzers $(FUZZ_DIR) $(FUZZ_SECONDS) $(JOBS)

# The CPU suite's bit-exactness promises (chunked = one-shot, batched = alone) on any x86-64 CPU:
# the binaries that hold them, once under each OpenBLAS kernel family that AMD and Intel machines
# get (SkylakeX where this CPU has AVX-512; none of our products may reach a BLAS, so none may
# change a bit), then once on each non-default path of our gemm (OMNI_CPU_ISA, tensor/cpu/gemm.h).
BLAS_KERNEL_TESTS ?= tensor_test model_test runtime_test qwen3_tts_talker_test engine_test
test-blas-kernels: build
	@cd $(BUILD_DIR)/tests && flags=$$(grep -m1 '^flags' /proc/cpuinfo); \
	has() { for f in "$$@"; do echo " $$flags " | grep -qw "$$f" || return 1; done; }; \
	runs="OPENBLAS_CORETYPE=Haswell OPENBLAS_CORETYPE=Zen OPENBLAS_CORETYPE=Sandybridge"; \
	if has avx512f; then runs="$$runs OPENBLAS_CORETYPE=SkylakeX OMNI_CPU_ISA=avx2"; fi; \
	if has avx2 fma; then runs="$$runs OMNI_CPU_ISA=scalar"; fi; \
	for run in $$runs; do for t in $(BLAS_KERNEL_TESTS); do \
	  echo "test-blas-kernels: $$run $$t"; \
	  env $$run ./$$t --gtest_brief=1 >blas-kernels.log 2>&1 || { cat blas-kernels.log; exit 1; }; \
	done; done; echo "test-blas-kernels: all passed under $$runs"

unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

asan: $(DEPS_STAMP)
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNI_SANITIZE=ON -DOMNI_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

# The runtime, server and engine tests under ThreadSanitizer (a build dir of their own).
TSAN_TESTS ?= runtime_test runtime_integration_test server_test server_unit_test speech_api_test engine_test
tsan: $(DEPS_STAMP)
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNI_TSAN=ON -DOMNI_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $(TSAN_TESTS) omnistage omnistage_test runtime_test_head
	@cd $(TSAN_DIR)/tests && printf '%s\n' $(TSAN_TESTS) | \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  xargs -P $(JOBS) -I{} sh -c 'start=$$(date +%s); if ./{} --gtest_brief=1 >{}.tsan.log 2>&1; \
	    then echo "tsan: {} passed ($$(grep -m1 -o "[0-9]* tests\? from [0-9]* test suites\? ran" {}.tsan.log), $$(( $$(date +%s) - start )) s)"; \
	    else cat {}.tsan.log; echo "tsan: {} FAILED (log in $(TSAN_DIR)/tests/{}.tsan.log)"; exit 1; fi'

# SOAK_SECONDS of mixed load against the demo models (scripts/soak): errors, RSS slopes, accounting.
soak: build
	scripts/soak --build $(BUILD_DIR) --seconds $(SOAK_SECONDS)

SOURCES = $(shell git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
CHANGED = $(shell git diff --name-only --diff-filter=d $(LINT_BASE) -- '*.h' '*.cc' ; git ls-files --others --exclude-standard -- '*.h' '*.cc')

format:
	clang-format -i $(SOURCES)

lint: build
	@files="$(filter %.cc,$(CHANGED))"; \
	if [ -z "$$files" ]; then echo "lint: no changed .cc files since $(LINT_BASE)"; exit 0; fi; \
	clang-format --dry-run --Werror $(CHANGED) && \
	clang-tidy -p $(BUILD_DIR) --quiet $$files

# The demo checkpoint is written once; its weights are random, so the server's output is noise.
DEMO_MODEL ?= $(BUILD_DIR)/demo-qwen3
SERVE_PORT ?= 8091

$(DEMO_MODEL)/model.safetensors: | build
	$(BUILD_DIR)/omnistage demo-model --arch qwen3 --out $(DEMO_MODEL)

serve: build $(DEMO_MODEL)/model.safetensors
	@echo "Try: curl http://127.0.0.1:$(SERVE_PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "       -d '{\"model\": \"$(DEMO_MODEL)\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 16}'"
	@echo "or open http://127.0.0.1:$(SERVE_PORT)/ in a browser (the playground)."
	@echo "(random weights: the text is noise; Ctrl-C stops the server)"
	$(BUILD_DIR)/omnistage serve $(DEMO_MODEL) --host 127.0.0.1 --port $(SERVE_PORT)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR)
