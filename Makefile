# Makefile -- builds libkeel (static and shared), the keel CLI, keel.pc, the
# tests, and runs them. Outputs go to $(BUILD) (build/ by default).
#
#   make                 library, CLI, pkg-config file
#   make test            unit, API, CLI and crash tests (plain build)
#   make asan            the tests again under ASan+UBSan (build/asan)
#   make tsan            the concurrent tests under TSan (build/tsan)
#   make test-objstore   the S3 client against a Ceph RADOS Gateway it starts
#   make check           test + asan + tsan + python + objstore: what CI runs
#   make demo            build and search GloVe-100 (340k) with the CLI
#   make bench-sqlite    keel through SQL against its API and sqlite-vec
#   make bench-remote    keel by URL from a gateway with 20 ms per request,
#                        cold and cached, against downloading the file
#                        (bench/remote.sh, doc/object_storage_bench.md)
#   make install PREFIX=/usr/local
#   make deps            install the Debian packages the build and tests need

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
SAN     ?=
OPT     ?= -O2

WARN    = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
          -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wundef -Wvla \
          -Wcast-align -Wwrite-strings -Wno-missing-field-initializers
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g -fPIC -pthread $(WARN) -Iinclude -Isrc \
          $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all) \
          $(CFLAGS)
LDLIBS_ALL = -lxxhash -lcurl -lpthread -lm $(LDLIBS)
LDFLAGS_ALL = -pthread $(if $(SAN),-fsanitize=$(SAN)) $(LDFLAGS)

# libhdf5 (Debian's libhdf5-dev) reads ann-benchmarks' .hdf5 files: the CLI
# links it, libkeel does not. Its headers are system headers (-isystem), out
# of reach of our warnings.
HDF5_CFLAGS ?= $(patsubst -I%,-isystem %,$(shell pkg-config --cflags hdf5 2>/dev/null || echo -I/usr/include/hdf5/serial))
HDF5_LIBS   ?= $(shell pkg-config --libs hdf5 2>/dev/null || echo -lhdf5_serial)

ARCH := $(shell uname -m)
ISA_SRC =
ifeq ($(ARCH),x86_64)
ISA_SRC = src/hnsw/dist_avx2.c src/hnsw/dist_avx512.c
endif
ifeq ($(ARCH),aarch64)
ISA_SRC = src/hnsw/dist_neon.c
endif

# The library's layers, each a folder of src/, each using only those below
# it (doc/architecture.md): base (messages, allocation), os (the system call
# table), io (batch reads), s3 (the object-store client), store (the file),
# hnsw (graph, build, search, distances), api (the public calls).
LAYERS   = base os io s3 cache store hnsw api
ALL_ISA  = src/hnsw/dist_avx2.c src/hnsw/dist_avx512.c src/hnsw/dist_neon.c
LIB_SRC  = $(filter-out $(ALL_ISA),$(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c))) \
           $(ISA_SRC)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC  = $(wildcard cli/*.c)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard test/test_*.c)
TEST_BIN = $(TEST_SRC:test/%.c=$(BUILD)/test/%)
TEST_LIB_SRC = $(wildcard test/lib/*.c)
TEST_LIB_OBJ = $(TEST_LIB_SRC:%.c=$(BUILD)/%.o)
# Kept between runs: not an intermediate file that make deletes.
.SECONDARY: $(TEST_LIB_OBJ)
# Fuzz targets: `make test` replays their committed corpora and the
# reproducers of what fuzzing found through replay.c; `make fuzz` fuzzes.
FUZZ_TARGETS = $(patsubst test/fuzz/%.c,%,$(wildcard test/fuzz/fuzz_*.c))
FUZZ_REPLAY  = $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay_%)

.PHONY: all lib cli test test-bins check-bins test-objstore-run asan tsan check install clean deps demo python test-python test-hnswlib crash-long stress-long \
        test-objstore \
        bench bench-smoke bench-remote bench-sqlite fuzz pagein-bench

VERSION = 0.1.0
SONAME  = libkeel.so.0
# The shared library as installed: the versioned file, the soname link that
# programs load, and the link that -lkeel finds.
SHLIB   = $(BUILD)/libkeel.so.$(VERSION) $(BUILD)/$(SONAME) $(BUILD)/libkeel.so

all: $(BUILD)/libkeel.a $(SHLIB) $(BUILD)/keel $(BUILD)/keel.pc $(BUILD)/keel_sqlite.so

# Once per build directory, before anything compiles: the packages the build
# needs are there (tools/checkdeps.sh names a missing one and `make deps`).
DEPS_OK = $(BUILD)/deps.ok
$(DEPS_OK):
	@CC="$(CC)" CFLAGS="$(CFLAGS_ALL)" LDFLAGS="$(LDFLAGS_ALL)" \
	    LDLIBS="$(LDLIBS_ALL)" HDF5_CFLAGS="$(HDF5_CFLAGS)" \
	    HDF5_LIBS="$(HDF5_LIBS)" sh tools/checkdeps.sh
	@mkdir -p $(dir $@) && touch $@

$(BUILD)/src/hnsw/dist_avx2.o: CFLAGS_ALL += -mavx2 -mfma -mf16c
$(BUILD)/src/hnsw/dist_avx512.o: CFLAGS_ALL += -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c

$(BUILD)/%.o: %.c $(wildcard include/*.h src/*/*.h cli/*.h sqlite/*.h test/*.h test/lib/*.h) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libkeel.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libkeel.so.$(VERSION): $(LIB_OBJ) src/keel.map
	$(CC) -shared -Wl,--version-script=src/keel.map -Wl,-soname,$(SONAME) \
	    $(LDFLAGS_ALL) -o $@ $(LIB_OBJ) $(LDLIBS_ALL)

$(BUILD)/$(SONAME) $(BUILD)/libkeel.so: $(BUILD)/libkeel.so.$(VERSION)
	ln -sf libkeel.so.$(VERSION) $@

# keel as a SQLite loadable extension (sqlite/, doc/sqlite.md): libkeel
# linked in whole and hidden, SQLite's entry points the only exports. It
# builds against Debian's libsqlite3-dev headers and links no SQLite: the
# host that loads it (the sqlite3 shell, Python's sqlite3) provides it.
SQLITE_SRC = $(wildcard sqlite/*.c)
SQLITE_OBJ = $(SQLITE_SRC:%.c=$(BUILD)/%.o)

$(BUILD)/keel_sqlite.so: $(SQLITE_OBJ) $(BUILD)/libkeel.a sqlite/keel_sqlite.map
	$(CC) -shared -Wl,--version-script=sqlite/keel_sqlite.map -Wl,--exclude-libs,ALL \
	    $(LDFLAGS_ALL) -o $@ $(SQLITE_OBJ) $(BUILD)/libkeel.a $(LDLIBS_ALL)

$(BUILD)/cli/%.o: CFLAGS_ALL += $(HDF5_CFLAGS)

$(BUILD)/keel: $(CLI_OBJ) $(BUILD)/libkeel.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(BUILD)/libkeel.a $(LDLIBS_ALL) $(HDF5_LIBS)

# Writes a small ann-benchmarks file for the CLI tests (test/mkhdf5.c).
$(BUILD)/test/mkhdf5: test/mkhdf5.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(HDF5_CFLAGS) $< -o $@ $(LDFLAGS_ALL) $(HDF5_LIBS)

$(BUILD)/keel.pc: keel.pc.in Makefile | $(DEPS_OK)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

$(BUILD)/test/%: test/%.c $(BUILD)/libkeel.a $(TEST_LIB_OBJ) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itest $< $(TEST_LIB_OBJ) -o $@ $(BUILD)/libkeel.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(BUILD)/fuzz/replay_%: test/fuzz/%.c test/fuzz/replay.c $(wildcard test/fuzz/*.h) $(BUILD)/libkeel.a | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itest/fuzz test/fuzz/replay.c $< -o $@ $(BUILD)/libkeel.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

test: all $(TEST_BIN) $(FUZZ_REPLAY) $(BUILD)/test/mkhdf5
	BUILD=$(BUILD) sh test/run.sh $(TEST_BIN)
	CC="$(CC)" BUILD=$(BUILD) SANFLAGS="$(if $(SAN),-fsanitize=$(SAN))" sh test/test_build.sh
	KEEL_MKHDF5=$(BUILD)/test/mkhdf5 KEEL_SAN="$(SAN)" sh test/test_cli.sh $(BUILD)/keel
	BUILD=$(BUILD) sh test/fuzz/replay.sh $(FUZZ_TARGETS)

# The object-store tests against a real server: test/objstore/run.sh starts a
# single-node Ceph RADOS Gateway on 127.0.0.1 (about 15 s), runs them (the C
# tests, then the CLI and the Python binding on published indexes), and
# stops it whatever happens. guide.sh then runs doc/objstore-guide.md's
# commands as written, against a gateway the guide starts (about 60 s). (`make test` runs the same binaries without a
# server: only their tests that need none.)
OBJSTORE_TESTS = $(BUILD)/test/test_s3 $(BUILD)/test/test_publish $(BUILD)/test/test_remote \
                 $(BUILD)/test/test_remote_faults $(BUILD)/test/test_remote_cancel \
                 $(BUILD)/test/test_remote_memory

test-objstore: $(OBJSTORE_TESTS) $(BUILD)/keel python $(BUILD)/test/no_userfaultfd
	$(MAKE) test-objstore-run
	BUILD=$(BUILD) bash test/objstore/suite-containers.sh

# The same, with everything already built (tools/check.sh runs this, and
# test/objstore/suite-containers.sh as a job of its own: the URL suites
# again with userfaultfd refused by a seccomp filter and KEEL_CACHE_POISON=1,
# then as an unprivileged user).
test-objstore-run:
	KEEL=$(BUILD)/keel PYTHON=$(PYTHON) bash test/objstore/run.sh $(OBJSTORE_TESTS) \
	    test/objstore/cli.sh test/objstore/python.sh test/objstore/guide.sh

# Runs a command with the userfaultfd system call refused (seccomp).
$(BUILD)/test/no_userfaultfd: test/objstore/no_userfaultfd.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $< -o $@

# Fuzzing with libFuzzer (clang): FUZZ_SECONDS per target, default 60.
fuzz:
	sh test/fuzz/run.sh

asan:
	$(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1 test

tsan:
	$(MAKE) BUILD=build/tsan SAN=thread OPT=-O1 build/tsan/libkeel.a \
	    $(patsubst test/%.c,build/tsan/test/%,$(wildcard test/test_concurrent*.c))
	KEEL_TSAN=1 BUILD=build/tsan sh test/run.sh $(patsubst test/%.c,build/tsan/test/%,$(wildcard test/test_concurrent*.c))

# keel against hnswlib and FAISS on GloVe-100 and Fashion-MNIST, and keel
# against hnswlib on a generated million (bench/run.sh, about an hour and a
# half; writes doc/benchmarks.md and doc/benchmarks.png). A shorter run:
#   SETS=gen1m-l2 GEN_N=200000 ROUNDS=1 EFS=16,64,256 OUT=bench/out/x \
#   DOC=bench/out/x/benchmarks.md make bench
bench: $(BUILD)/libkeel.a $(BUILD)/keel_sqlite.so python
	sh tools/deps.sh bench
	BUILD=$(BUILD) sh bench/run.sh
	$(PYTHON) bench/sqlite.py --ext $(abspath $(BUILD))/keel_sqlite.so

# keel through SQL (build/keel_sqlite.so) against keel's API on the same file
# and sqlite-vec (npm, bench only) on the GloVe slice; about a minute.
# Writes bench/out/sqlite/report.md (doc/sqlite.md, "Speed").
bench-sqlite: $(BUILD)/keel_sqlite.so python
	$(PYTHON) bench/sqlite.py --ext $(abspath $(BUILD))/keel_sqlite.so

# keel reading GloVe-100 (340k) by URL from a Ceph RADOS Gateway it starts,
# with 20 ms added to every request by build/s3_proxy: cold starts per
# overlap setting, warm or not, the cached QPS, and the download-and-load
# path of a single-file index (bench/remote.sh says how; 13-15 minutes with
# the indexes built; ROUNDS=3 NQ=100 for a shorter run). Writes bench/out/remote/report.md.
bench-remote: $(BUILD)/libkeel.a $(BUILD)/keel $(BUILD)/s3_proxy
	BUILD=$(BUILD) bash bench/remote.sh

# Which call overlaps cold page reads on this kernel (doc/batch_reads.md):
#   make pagein-bench && build/pagein_bench FILE [--ranges 32] [--span 4096]
pagein-bench: $(BUILD)/pagein_bench

# Searches whose pages are all in memory, by URL against by path
# (bench/cached_url_qps.c; under test/objstore/run.sh).
$(BUILD)/cached_url_qps: bench/cached_url_qps.c $(BUILD)/libkeel.a | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(BUILD)/libkeel.a $(LDFLAGS_ALL) $(LDLIBS_ALL)

$(BUILD)/pagein_bench: bench/pagein_bench.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -o $@ $< -luring -lpthread

# A proxy in front of an S3 server that delays every request (benchmarks of
# readers by URL at a realistic round trip; bench/s3_proxy.c says how):
#   build/s3_proxy --upstream http://127.0.0.1:PORT --delay-ms 20 --port-file F
$(BUILD)/s3_proxy: bench/s3_proxy.c test/lib/s3proxy.c test/lib/s3proxy.h | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itest bench/s3_proxy.c test/lib/s3proxy.c -o $@ $(LDFLAGS_ALL) -lpthread

# The same code on 2,000 vectors of test/data, one round, every engine.
bench-smoke: $(BUILD)/libkeel.a python
	BUILD=$(BUILD) SMOKE=1 sh bench/run.sh

# Thousands of process kills per variant (the test suite runs 70 each).
crash-long: $(BUILD)/test/test_crash
	KEEL_CRASH_ROUNDS=$${KEEL_CRASH_ROUNDS:-2000} $(BUILD)/test/test_crash

# Every public call at once on shared handles, for KEEL_STRESS_SECONDS
# (default 300; the test suites run it for 2).
stress-long: $(BUILD)/test/test_concurrent_stress
	KEEL_STRESS_SECONDS=$${KEEL_STRESS_SECONDS:-300} $(BUILD)/test/test_concurrent_stress

PYTHON ?= /usr/bin/python3

# The Python extension, built in place (python/keel/_keel*.so).
python: $(BUILD)/libkeel.a
	cd python && KEEL_LIB=$(abspath $(BUILD))/libkeel.a $(PYTHON) setup.py -q build_ext --inplace

test-python: python $(BUILD)/keel_sqlite.so
	KEEL_SQLITE=$(abspath $(BUILD))/keel_sqlite.so $(PYTHON) -X dev -W error -m pytest -q python/tests

# hnswlib 0.8's own Python binding tests against keel.hnswlib, their import
# line changed and nothing else (test/hnswlib_tests.sh fetches them from
# Debian's source archive into $(BUILD)/hnswlib-src; about 90 s of CPU;
# make check runs it as its job "hnswlib").
test-hnswlib: python
	BUILD=$(BUILD) PYTHON=$(PYTHON) KEEL_HNSWLIB_TESTS_REQUIRED=1 sh test/hnswlib_tests.sh

# Everything a suite runs, built but not run: the plain and sanitizer test
# binaries, the CLI and the Python extension.
test-bins: all $(TEST_BIN) $(FUZZ_REPLAY) $(BUILD)/test/mkhdf5 $(OBJSTORE_TESTS) \
           $(BUILD)/test/no_userfaultfd

# build/tsan/test/test_remote_concurrent: publish and prune beside a URL
# reader's searches and refreshes under TSan (tools/check.sh runs it against
# a gateway of its own).
check-bins:
	$(MAKE) test-bins
	$(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1 test-bins
	$(MAKE) BUILD=build/tsan SAN=thread OPT=-O1 build/tsan/libkeel.a \
	    $(patsubst test/%.c,build/tsan/test/%,$(wildcard test/test_concurrent*.c)) \
	    build/tsan/test/test_remote_concurrent
	$(MAKE) python

# The README's second command: installs what the tests need, builds every
# suite, then runs them side by side (tools/check.sh: one line a suite as it
# ends, logs in build/check/, and a last line "check: N passed, N failed").
check:
	sh tools/deps.sh
	$(MAKE) -j$(shell nproc 2>/dev/null || echo 2) check-bins
	bash tools/check.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 include/keel.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libkeel.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libkeel.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libkeel.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf libkeel.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libkeel.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' keel.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/keel.pc
	install -m 755 $(BUILD)/keel $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(BUILD)/keel_sqlite.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 doc/keel.1 $(DESTDIR)$(PREFIX)/share/man/man1/

deps:
	sh tools/deps.sh

# The README's first command: the main job on real data.
demo:
	sh tools/deps.sh
	$(MAKE) all
	sh tools/demo.sh

clean:
	rm -rf build python/build python/keel/*.so python/*.egg-info
