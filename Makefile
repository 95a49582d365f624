# The whole interface a newcomer needs. See README.md.
BUILD_DIR    ?= build
ASAN_DIR     ?= build-asan
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=
LINT_BASE    ?= HEAD
DEPS_STAMP   := $(BUILD_DIR)/.deps-installed

.PHONY: build test unit asan format lint deps clean serve

# install-deps is idempotent; the stamp skips even its quick check until the script changes.
$(DEPS_STAMP): scripts/install-deps
	bash scripts/install-deps
	@mkdir -p $(BUILD_DIR) && touch $@

deps: $(DEPS_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP)
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

asan: $(DEPS_STAMP)
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNI_SANITIZE=ON -DOMNI_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

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
	@echo "(random weights: the text is noise; Ctrl-C stops the server)"
	$(BUILD_DIR)/omnistage serve $(DEMO_MODEL) --host 127.0.0.1 --port $(SERVE_PORT)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
