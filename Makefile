# Thin wrapper over CMake: each target is a configure, a build and at most one command.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all configure test bench bench-full clean format format-check

all: configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cc')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h' '*.cc')
