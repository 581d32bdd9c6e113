# SPDX-License-Identifier: MIT
# Thin wrapper over CMake: each target is a configure, a build and a ctest or runner line.
#   make          build libuslab.so, libuslab.a, libuslab-preload.so (in ./build)
#   make test     everything CI runs: a clang-format check, the test suite, glibc's malloc
#                 tests under uslab, CPython's tests under uslab, the suite under UBSan (a
#                 Debug build that cmake, make and the compilers make on uslab), the stress
#                 tests under TSan and UBSan, memcheck (a Valgrind client-request build),
#                 then 30 s of fuzzing for each of three targets
#   make check    just the test suite of ./build (the quick inner loop)
#   make layers   the layer check of docs/design.md §1 on ./build's objects and src/'s includes
#                 (ctest label layers)
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST = ctest --output-on-failure -j $(JOBS)

.PHONY: all configure check layers test test-glibc test-python test-ubsan test-tsan test-valgrind fuzz clean format format-check

all: configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

check: all
	cd $(BUILD) && $(CTEST)

# The checker's self-test, then the file graph of the library's objects and the includes of
# src/ against the rank table of docs/design.md §1: no upward use, no cycle, no upward include
# (tools/check_layers.py; LAYERS_FLAGS=--edges also lists every edge and include). Both are
# ctests too (label layers), so make check runs them.
LAYERS_FLAGS ?=
layers: all
	cd $(BUILD) && $(CTEST) -R '^layers_selftest$$'
	python3 tools/check_layers.py $(LAYERS_FLAGS) --root . docs/design.md @$(BUILD)/tests/layers/objects.txt

# The parts one after another, each followed by a line with its time in seconds, and the
# total at the end (where make test's time goes: the README says how long it takes).
TEST_PARTS = format-check check test-glibc test-python test-ubsan test-tsan test-valgrind fuzz
test:
	@t0=$$(date +%s); for part in $(TEST_PARTS); do \
	    t=$$(date +%s); $(MAKE) --no-print-directory $$part || exit 1; \
	    echo "make test: $$part took $$(( $$(date +%s) - t )) s"; \
	done; echo "make test: every part passed in $$(( $$(date +%s) - t0 )) s"

# glibc 2.36's own malloc tests (from Debian's glibc-source tarball, built at test time in
# $(BUILD)/glibc-tests), each run under libuslab-preload.so, and under plain glibc as the
# control where it fails there: tests/glibc/run.py. Fails if one fails under uslab; skips
# when the tarball is missing, unless CI is set.
# TIMEOUTFACTOR (3 unless set) scales each test's own timeout, as glibc's make check does on
# slow machines: on session 68's VM tst-mallocfork2 and tst-mallocfork3 took 90-100 s of
# their 100 s under plain glibc too, and timed out under both while the machine was busy.
test-glibc: all
	TIMEOUTFACTOR=$${TIMEOUTFACTOR:-3} python3 tests/glibc/run.py --build $(BUILD) --jobs $(JOBS)

# CPython's own regression tests (Debian's libpython3.X-testsuite) on /usr/bin/python3 with
# PYTHONMALLOC=malloc under libuslab-preload.so, a module per process; a module that fails is
# run again under plain glibc as the control (tests/python/run.py). Fails if one fails under
# uslab only; skips when the test package is missing, unless CI is set.
test-python: all
	python3 tests/python/run.py --build $(BUILD) --jobs $(JOBS)

# The API library and its tests under UndefinedBehaviorSanitizer (a sanitizer's tree builds
# no preload tests, the preload library being never sanitized, nor layer checks, the same in
# every tree; the stress tests run under UBSan in test-tsan's tree, and were 126 of this
# run's 230 s of test time here), built as a Debug build: -O0 hides no undefined
# behaviour behind an optimisation, and it is the build where gcc's -Wformat-truncation
# judges differently (a Debug build of tools/top.c failed under -Werror, unnoticed).
# Self-hosted: the configure and the build run with LD_PRELOAD set to $(BUILD)'s preload
# library, so cmake, make and the compilers (cc1, as, ld) allocate from uslab, and the tree
# they make must pass its tests. The library is a copy (in build-ubsan-lib), so that a
# rebuild of $(BUILD) never replaces a library in use; the probe first proves the preload
# takes effect (the loader only warns about a library it cannot preload). The tests run
# without it: the preload library exports the API, which would take the place of the
# sanitized library's. (Until session 56 a separate RelWithDebInfo tree, build-selfhost, was
# made and tested this way: 160-180 s of make test, for what the preload label and CPython's
# suite test anyway.)
UBSAN_PRELOAD = env LD_PRELOAD=$(CURDIR)/build-ubsan-lib/libuslab-preload.so
test-ubsan: all
	rm -rf build-ubsan build-ubsan-lib
	mkdir build-ubsan-lib && cp $(BUILD)/libuslab-preload.so build-ubsan-lib/
	$(UBSAN_PRELOAD) $(BUILD)/tests/preload/preload_probe uslab
	$(UBSAN_PRELOAD) $(MAKE) all BUILD=build-ubsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DUSLAB_SANITIZE=undefined -DUSLAB_BUILD_BENCH=OFF"
	cd build-ubsan && $(CTEST)

# The stress tests of the API library under ThreadSanitizer and UndefinedBehaviorSanitizer
# together (clang), and only their programs built. The fork handler holds every cache lock
# at once, more than the deadlock detector tracks, so that detector is off.
test-tsan:
	$(MAKE) configure BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DUSLAB_SANITIZE=thread,undefined -DUSLAB_BUILD_BENCH=OFF"
	cmake --build build-tsan -j $(JOBS) --target stress-programs
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:detect_deadlocks=0:die_after_fork=0 $(CTEST) -L stress

# libFuzzer (clang), FUZZ_TIME seconds each: tests/fuzz/fuzz_cache_ops (object caches, about 11k
# inputs) on a copy of tests/fuzz/corpus, tests/fuzz/fuzz_malloc_ops (the malloc family,
# about 6k) on a copy of tests/fuzz/corpus_malloc, and tests/fuzz/fuzz_symbols (the symbols
# layer's ELF and DWARF readers) on seeds made here from a -g build of a test program; the
# corpora in tests/ stay unchanged. Fails if a fuzzer finds a crash.
FUZZ_TIME ?= 30
fuzz:
	$(MAKE) configure BUILD=build-fuzz CMAKE_FLAGS="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DUSLAB_BUILD_FUZZ=ON -DUSLAB_BUILD_BENCH=OFF"
	cmake --build build-fuzz -j $(JOBS) --target fuzz_cache_ops fuzz_malloc_ops fuzz_symbols
	rm -rf build-fuzz/corpus build-fuzz/corpus_malloc build-fuzz/corpus_symbols
	cp -r tests/fuzz/corpus build-fuzz/corpus && cp -r tests/fuzz/corpus_malloc build-fuzz/corpus_malloc
	mkdir build-fuzz/corpus_symbols && cc -O1 -gdwarf-5 -fPIE -pie -o build-fuzz/symbols_seed tests/death/symbols_program.c
	python3 tests/fuzz/seed_symbols.py build-fuzz/symbols_seed build-fuzz/corpus_symbols
	cd build-fuzz && ./tests/fuzz/fuzz_cache_ops -max_total_time=$(FUZZ_TIME) -print_final_stats=1 corpus
	cd build-fuzz && ./tests/fuzz/fuzz_malloc_ops -max_total_time=$(FUZZ_TIME) -print_final_stats=1 corpus_malloc
	cd build-fuzz && ./tests/fuzz/fuzz_symbols -max_total_time=$(FUZZ_TIME) -print_final_stats=1 -max_len=65536 corpus_symbols

.PHONY: bench bench-full

# Benchmarks (bench/, docs/benchmarks.md): builds the library and the benchmark programs in
# $(BUILD), then runs them under glibc, uslab and every peer allocator installed.
bench:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target uslab-bench
	python3 bench/run.py --quick --build $(BUILD) --out bench/results/quick

bench-full:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target uslab-bench
	python3 bench/run.py --full --build $(BUILD)

# A build with Valgrind client requests: memcheck must see uslab's objects. Only the
# libraries and the label's one program are built (the whole tree took a minute, for five
# tests of two seconds).
test-valgrind:
	$(MAKE) configure BUILD=build-vg CMAKE_FLAGS="-DUSLAB_VALGRIND=ON -DUSLAB_BUILD_BENCH=OFF"
	cmake --build build-vg -j $(JOBS) --target uslab uslab_static uslab-preload vg_program
	cd build-vg && $(CTEST) -L valgrind

clean:
	rm -rf $(BUILD) build-ubsan build-ubsan-lib build-tsan build-vg build-fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cc' '*.cpp')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h' '*.cc' '*.cpp')
