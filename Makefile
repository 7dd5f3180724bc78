# Rowan build.
#
#   make            build src/rowan-server (and the tools: rowan-check-pool...)
#   make run        build, then start the server on its embedded default
#   make test       build and run every test (unit, fuzz, integration, crash)
#   make asan       build with AddressSanitizer and run the tests against it
#   make ubsan      build with UndefinedBehaviorSanitizer and run the tests
#   make fuzz-long  run the RESP parser and datagram codec fuzzers (libFuzzer)
#                   for FUZZ_SECONDS each
#   make soak-resp  long-lived connections against one server for SOAK_SECONDS
#   make soak       kill -9 and power-loss cycles for SOAK_SECONDS (default 600)
#                   with the acknowledged-write checker
#   make bench      the benchmarks behind BENCHMARKS.md
#   make bench-failover  kill -9 failovers: managed Rowan against Redis Cluster
#
# Every variant builds into build/<variant>/; the default variant's server is
# also linked at src/rowan-server, where the README and tests expect it.

VARIANT ?= release
BUILD   := build/$(VARIANT)
CC      ?= cc
WARN    := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
OPT     := -O2 -g
SAN     :=
ifeq ($(VARIANT),asan)
  OPT := -O1 -g -fno-omit-frame-pointer
  SAN := -fsanitize=address
endif
ifeq ($(VARIANT),ubsan)
  OPT := -O1 -g -fno-omit-frame-pointer
  # gcc leaves float-cast-overflow out of "undefined"; strtod'd arguments
  # (DEBUG SLEEP inf) reach such casts.
  SAN := -fsanitize=undefined,float-cast-overflow \
         -fno-sanitize-recover=undefined,float-cast-overflow
endif
SRC_INC := -Isrc $(patsubst %/,-I%,$(sort $(dir $(wildcard src/*/*.h))))
CFLAGS  += -std=gnu11 $(OPT) $(WARN) $(SAN) -pthread -MMD -MP \
           $(SRC_INC) -Iredis-compat -Irdma -D_GNU_SOURCE
LDFLAGS += $(SAN) -pthread
# -lmlx5: rdma/transport_verbs.c queries mlx5dv for a striding (multi-packet) RQ.
# -lcrypto: HMAC-SHA256 of the peer handshake (src/repl/peer_auth.c).
# Lua 5.1 with Debian's cjson and bit modules: scripting (redis-compat/t_script.c).
LUA_LIBS := -llua5.1 -llua5.1-cjson -llua5.1-bitop
# -lsystemd: sd_notify for `supervised systemd` (src/engine/daemon.c).
# -lssl: TLS for clients (src/engine/tls.c, src/engine/conn.c); -levent_openssl: the
# cluster bus over TLS (src/cluster/bus.c, tls-cluster).
LIBS    := -levent_core -levent_pthreads -levent_openssl -lpmem -libverbs -lrdmacm -lmlx5 -lssl -lcrypto -lzookeeper_mt \
           -lsystemd -lm $(LUA_LIBS)
BENCH_LIBS := -lhiredis -levent_core -levent -lm

CORE_SRC := $(filter-out src/main.c,$(wildcard src/*.c src/*/*.c)) $(wildcard redis-compat/*.c) \
            $(wildcard rdma/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(BUILD)/src/main.o
SERVER   := $(BUILD)/rowan-server
UNIT_SRC := $(wildcard tests/unit/test-*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_BIN := $(BUILD)/tests/fuzz-resp
FUZZ_DGRAM := $(BUILD)/tests/fuzz-dgram
BENCH_SRC := $(wildcard utils/rowan-bench*.c utils/bench/*.c)
BENCH_BIN := $(BUILD)/rowan-bench
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/%.o)
BENCH_UNIT := $(BUILD)/tests/bench/test-bench
CHECK_POOL := $(BUILD)/rowan-check-pool
BENCH_TRANSPORT := $(BUILD)/bench-transport
BENCH_MAPFLUSH := $(BUILD)/bench-mapflush
BENCH_RANDREAD := $(BUILD)/bench-randread
SHIM     := $(BUILD)/tests/powerloss-shim.so

.PHONY: all deps run test unit fuzz integration asan ubsan fuzz-long soak soak-resp bench bench-failover \
        bench-unit clean layering
all: deps $(SERVER) $(CHECK_POOL) $(BENCH_TRANSPORT) $(BENCH_MAPFLUSH) $(BENCH_RANDREAD) $(SHIM) $(UNIT_BIN) $(FUZZ_BIN) $(FUZZ_DGRAM) $(if $(BENCH_SRC),$(BENCH_BIN))
ifeq ($(VARIANT),release)
all: src/rowan-server utils/rowan-check-pool utils/bench-transport $(if $(BENCH_SRC),utils/rowan-bench) \
     utils/bench-mapflush utils/bench-randread
src/rowan-server: $(SERVER)
	ln -sf ../$(SERVER) $@
utils/rowan-check-pool: $(CHECK_POOL)
	ln -sf ../$(CHECK_POOL) $@
utils/rowan-bench: $(BENCH_BIN)
	ln -sf ../$(BENCH_BIN) $@
utils/bench-transport: $(BENCH_TRANSPORT)
	ln -sf ../$(BENCH_TRANSPORT) $@
utils/bench-mapflush: $(BENCH_MAPFLUSH)
	ln -sf ../$(BENCH_MAPFLUSH) $@
utils/bench-randread: $(BENCH_RANDREAD)
	ln -sf ../$(BENCH_RANDREAD) $@
endif

# Install missing Debian packages (no-op when everything is there).
deps:
	@bash deps/install.sh --check >/dev/null 2>&1 || bash deps/install.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# An archive is rebuilt from scratch (rm -f, then ar rcs) whenever its
# object list changes, not only when one of its objects is newer: a source
# removed or renamed must not leave its old object inside, where the linker
# could still pick its symbols. So each archive also depends on a list file
# (FILE.objs), rewritten only when the list differs from the last build's.
# $(call objlist,FILE,OBJECTS) in a FORCE'd rule writes it.
.PHONY: FORCE
FORCE:
objlist = @mkdir -p $(dir $(1)); printf '%s\n' $(2) > $(1).tmp; \
          if cmp -s $(1).tmp $(1); then rm -f $(1).tmp; else mv $(1).tmp $(1); fi

$(BUILD)/librowan.objs: FORCE
	$(call objlist,$@,$(CORE_OBJ))
$(BUILD)/librowan.a: $(CORE_OBJ) $(BUILD)/librowan.objs
	rm -f $@ && ar rcs $@ $(CORE_OBJ)

$(SERVER): $(MAIN_OBJ) $(BUILD)/librowan.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# bench-transport: the kernel's bound for the native edge, an echo over
# UDP/TCP (utils/bench-transport.c, BENCHMARKS.md); standalone, no librowan.
$(BENCH_TRANSPORT): $(BUILD)/utils/bench-transport.o
	$(CC) $(LDFLAGS) -pthread -o $@ $^

# bench-mapflush (CPU per group commit, mapping vs pwrite) and bench-randread
# (the device's random-read IOPS): standalone, no librowan (BENCHMARKS.md).
$(BENCH_MAPFLUSH): $(BUILD)/utils/bench-mapflush.o
	$(CC) $(LDFLAGS) -pthread -o $@ $^
$(BENCH_RANDREAD): $(BUILD)/utils/bench-randread.o
	$(CC) $(LDFLAGS) -pthread -o $@ $^

# rowan-check-pool: recovery's own scan over a pool file (utils/rowan-check-pool.c).
$(CHECK_POOL): $(BUILD)/utils/rowan-check-pool.o $(BUILD)/librowan.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/test-%: $(BUILD)/tests/unit/test-%.o $(BUILD)/librowan.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lhiredis

# The core without the Redis edge: every object but redis-compat/'s (src/,
# and rdma/'s transports, which the replication code starts). A unit test
# named test-core-*.c links against nothing else, so it cannot reach
# redis-compat/ (tests/unit/test-core-types.c: the types through src/types/).
CORE_ONLY_OBJ := $(filter-out $(BUILD)/redis-compat/%,$(CORE_OBJ))
$(BUILD)/libcore.objs: FORCE
	$(call objlist,$@,$(CORE_ONLY_OBJ))
$(BUILD)/libcore.a: $(CORE_ONLY_OBJ) $(BUILD)/libcore.objs
	rm -f $@ && ar rcs $@ $(CORE_ONLY_OBJ)

$(BUILD)/tests/test-core-%: $(BUILD)/tests/unit/test-core-%.o $(BUILD)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The power-loss shim (LD_PRELOAD into rowan-server, tests/powerloss/shim.c):
# a test tool, never linked into the server; built without sanitizers.
$(SHIM): tests/powerloss/shim.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g $(WARN) -fPIC -shared -pthread -o $@ $< -ldl

# The fuzz driver always carries ASan+UBSan: a parser bug must crash loudly.
# Both fuzzers share the standalone mutation fuzzer (tests/fuzz/standalone.c);
# libFuzzer builds (fuzz-long) leave it out.
$(FUZZ_BIN): tests/fuzz/fuzz-resp.c tests/fuzz/standalone.c tests/fuzz/standalone.h redis-compat/resp.c redis-compat/resp.h src/base/rbuf.c src/base/rbuf.h src/base/strutil.c src/base/strutil.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -g -Iredis-compat $(SRC_INC) -D_GNU_SOURCE $(WARN) \
	  -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	  -DFUZZ_STANDALONE -o $@ tests/fuzz/fuzz-resp.c tests/fuzz/standalone.c redis-compat/resp.c src/base/rbuf.c src/base/strutil.c

# The datagram codec's fuzzer (rdma/dgram.c), built the same way.
$(FUZZ_DGRAM): tests/fuzz/fuzz-dgram.c tests/fuzz/standalone.c tests/fuzz/standalone.h rdma/dgram.c rdma/dgram.h src/base/le.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -g -Irdma $(SRC_INC) -D_GNU_SOURCE $(WARN) \
	  -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	  -DFUZZ_STANDALONE -o $@ tests/fuzz/fuzz-dgram.c tests/fuzz/standalone.c rdma/dgram.c

$(BENCH_BIN): $(BENCH_OBJ) $(BUILD)/src/base/hash.o $(BUILD)/src/base/crc32c.o
	$(CC) $(LDFLAGS) -o $@ $^ $(BENCH_LIBS)

# rowan-bench's generators, histogram and cluster parsing (no server needed).
$(BENCH_UNIT): $(BUILD)/tests/bench/test-bench.o $(filter-out %/main.o,$(BENCH_OBJ)) \
               $(BUILD)/src/base/hash.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(BENCH_LIBS)

# The embedded defaults: 127.0.0.1:6379, pool in ./data (rowan.conf documents them).
run: all
	./src/rowan-server

# ---- tests ----
PYTEST := /usr/bin/python3 -m pytest -q -p no:cacheprovider
FUZZ_SECONDS ?= 20

test: all
	$(MAKE) --no-print-directory unit fuzz integration VARIANT=$(VARIANT)

unit: $(UNIT_BIN) bench-unit layering
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

# The core never includes the edge (issue 15): no file of src/ may include a
# header that exists in redis-compat/ (the core calls the edge through
# src/engine/edge.h's function pointers instead).
EDGE_HEADERS_RE := $(subst $(eval) ,|,$(subst .,\.,$(notdir $(wildcard redis-compat/*.h))))
layering:
	@! grep -nE '^\s*#\s*include\s*"($(EDGE_HEADERS_RE))"' src/*.c src/*/*.c src/*/*.h || { echo "src/ includes redis-compat/ headers (above)"; exit 1; }

fuzz: $(FUZZ_BIN) $(FUZZ_DGRAM)
	$(FUZZ_BIN) -seconds=10 tests/fuzz/corpus
	$(FUZZ_DGRAM) -seconds=10

# Node packages of the application tests (tests/apps/package-lock.json),
# installed from the npm registry when missing or out of date.
APPS_MODULES := tests/apps/node_modules/.package-lock.json
$(APPS_MODULES): tests/apps/package.json tests/apps/package-lock.json
	npm ci --prefix tests/apps --no-audit --no-fund

integration: $(SERVER) $(CHECK_POOL) $(SHIM) $(APPS_MODULES)
	ROWAN_SERVER=$(abspath $(SERVER)) ROWAN_BENCH=$(abspath $(BENCH_BIN)) $(PYTEST) tests/integration

# Randomized kill -9 and power-loss cycles under load, each checked for every
# acknowledged write (tests/soak/run.py); prints cycles, writes checked, lost.
SOAK_SECONDS ?= 600
soak: all
	ROWAN_SERVER=$(abspath $(SERVER)) /usr/bin/python3 tests/soak/run.py --seconds $(SOAK_SECONDS)

# Reports go to stderr: the unit tests and the fuzzer fail on them, and the
# integration conftest fails a test whose rowan-server printed one. Leak
# checking is explicit; UBSan prints no stack unless asked. Options already
# in the environment come last, so they win.
asan:
	ASAN_OPTIONS=detect_leaks=1:$$ASAN_OPTIONS $(MAKE) --no-print-directory test VARIANT=asan
ubsan:
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:$$UBSAN_OPTIONS \
	  $(MAKE) --no-print-directory test VARIANT=ubsan

fuzz-long: deps
	@mkdir -p build/libfuzzer/corpus
	clang -std=gnu11 -O1 -g -Iredis-compat $(SRC_INC) -D_GNU_SOURCE \
	  -fsanitize=fuzzer,address,undefined -o build/libfuzzer/fuzz-resp \
	  tests/fuzz/fuzz-resp.c redis-compat/resp.c src/base/rbuf.c src/base/strutil.c
	build/libfuzzer/fuzz-resp -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  build/libfuzzer/corpus tests/fuzz/corpus 2>&1 | tail -20 || true
	@mkdir -p build/libfuzzer/corpus-dgram
	clang -std=gnu11 -O1 -g -Irdma $(SRC_INC) -D_GNU_SOURCE \
	  -fsanitize=fuzzer,address,undefined -o build/libfuzzer/fuzz-dgram \
	  tests/fuzz/fuzz-dgram.c rdma/dgram.c
	build/libfuzzer/fuzz-dgram -max_total_time=$(FUZZ_SECONDS) -max_len=4200 \
	  build/libfuzzer/corpus-dgram 2>&1 | tail -20 || true

# The RESP soak (tests/soak/resp_soak.py) for longer than the 20 s that
# `make test` runs: one server, long-lived connections sending random valid,
# unknown, inline, empty and split requests (some writing whole pipelines
# before reading), every reply checked, PING liveness checks after every
# batch. SOAK_SECONDS as for `make soak`; SOAK_ARGS: e.g. --seed N --conns 8.
soak-resp: $(SERVER)
	ROWAN_SERVER=$(abspath $(SERVER)) /usr/bin/python3 tests/soak/resp_soak.py \
	  --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

bench-unit: $(BENCH_UNIT)
	@echo "== $(BENCH_UNIT)"; $(BENCH_UNIT)

# The benchmarks behind BENCHMARKS.md, Rowan and redis-server in the same
# run: redis-benchmark (utils/bench-redis), then YCSB-style workloads with
# rowan-bench (utils/bench-compare), then replicated writes, 3-node Rowan
# against redis-server with 2 replicas and WAIT (utils/bench-replication).
# BENCH_ARGS=--write records the tables in BENCHMARKS.md.
bench: all
	ROWAN_SERVER=$(abspath $(SERVER)) /usr/bin/python3 utils/bench-redis $(BENCH_ARGS)
	ROWAN_SERVER=$(abspath $(SERVER)) ROWAN_BENCH=$(abspath $(BENCH_BIN)) \
	  /usr/bin/python3 utils/bench-compare $(BENCH_ARGS)
	ROWAN_SERVER=$(abspath $(SERVER)) ROWAN_BENCH=$(abspath $(BENCH_BIN)) \
	  /usr/bin/python3 utils/bench-replication $(BENCH_ARGS)

# failover under write load: kill -9 of a primary, a managed 3-node Rowan
# cluster (ZooKeeper) against Redis Cluster (utils/bench-failover; minutes:
# Redis at its default cluster-node-timeout needs ~20 s per kill).
bench-failover: all
	ROWAN_SERVER=$(abspath $(SERVER)) /usr/bin/python3 utils/bench-failover $(FAILOVER_ARGS)

# Data larger than memory (utils/bench-capacity, issue 14): under a cgroup
# memory cap, load, uniform and zipfian GETs and recovery for data that fits
# and data 6x the cap, Rowan against Redis (CAP_MB, FACTOR... in the script).
.PHONY: bench-capacity
bench-capacity: all
	ROWAN_SERVER=$(abspath $(SERVER)) ROWAN_BENCH=$(abspath $(BENCH_BIN)) \
	  /usr/bin/python3 utils/bench-capacity

clean:
	rm -rf build src/rowan-server utils/rowan-bench utils/rowan-check-pool utils/bench-transport \
	  utils/bench-mapflush utils/bench-randread

-include $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%.d) $(CORE_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(BENCH_UNIT).d \
         $(BUILD)/utils/rowan-check-pool.d $(BUILD)/utils/bench-mapflush.d $(BUILD)/utils/bench-randread.d

# ---- librowan: the native client library (rdma/client/, issue 15) ----
# Built position-independent with hidden visibility: the .so exports only
# rowan.h's functions, and the .a holds one object whose other symbols
# (the codec, hash_slot) are made local, so it links next to anything.
# `make install` (PREFIX, DESTDIR) installs rowan.h, the libraries and rowan.pc.
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
CLIENT_SRC := $(wildcard rdma/client/*.c) rdma/dgram.c src/base/hash.c
CLIENT_OBJ := $(filter-out %/example.o,$(CLIENT_SRC:%.c=$(BUILD)/client/%.o))
CLIENT_A   := $(BUILD)/lib/librowan.a
CLIENT_SO  := $(BUILD)/lib/librowan.so.0.1
CLIENT_LIBS := -lhiredis -levent_core
CLIENT_EXAMPLE := $(BUILD)/rowan-example
CLIENT_TEST := $(BUILD)/tests/librowan-test

all: $(CLIENT_A) $(CLIENT_SO) $(CLIENT_EXAMPLE) $(CLIENT_TEST)
lib: $(CLIENT_A) $(CLIENT_SO)

$(BUILD)/client/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Irdma/client -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/client/lib.objs: FORCE
	$(call objlist,$@,$(CLIENT_OBJ))
$(CLIENT_A): $(CLIENT_OBJ) $(BUILD)/client/lib.objs
	@mkdir -p $(dir $@)
	ld -r -o $(BUILD)/client/rowan-all.o $(CLIENT_OBJ)
	objcopy --localize-hidden $(BUILD)/client/rowan-all.o
	rm -f $@ && ar rcs $@ $(BUILD)/client/rowan-all.o

$(CLIENT_SO): $(CLIENT_OBJ) $(BUILD)/client/lib.objs
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,librowan.so.0 -o $@ $(CLIENT_OBJ) $(CLIENT_LIBS)
	ln -sf librowan.so.0.1 $(BUILD)/lib/librowan.so.0
	ln -sf librowan.so.0.1 $(BUILD)/lib/librowan.so

$(CLIENT_EXAMPLE): rdma/client/example.c rdma/client/rowan.h $(CLIENT_A)
	$(CC) $(CFLAGS) -Irdma/client -o $@ $< $(CLIENT_A) $(LDFLAGS) $(CLIENT_LIBS)

$(CLIENT_TEST): tests/integration/librowan_test.c rdma/client/rowan.h $(CLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Irdma/client -o $@ $< $(CLIENT_A) $(LDFLAGS) $(CLIENT_LIBS)

# bench-pingpong: blocking round trips, hiredis against librowan's blocking
# API, one connection per thread (utils/bench-pingpong.c, BENCHMARKS.md).
CLIENT_PINGPONG := $(BUILD)/bench-pingpong
all: $(CLIENT_PINGPONG)
$(CLIENT_PINGPONG): utils/bench-pingpong.c rdma/client/rowan.h $(CLIENT_A)
	$(CC) $(CFLAGS) -Irdma/client -o $@ $< $(CLIENT_A) $(LDFLAGS) $(CLIENT_LIBS) -pthread

install: $(CLIENT_A) $(CLIENT_SO)
	install -d $(DESTDIR)$(PREFIX)/include/rowan $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 rdma/client/rowan.h $(DESTDIR)$(PREFIX)/include/rowan/rowan.h
	install -m 644 $(CLIENT_A) $(DESTDIR)$(LIBDIR)/librowan.a
	install -m 755 $(CLIENT_SO) $(DESTDIR)$(LIBDIR)/librowan.so.0.1
	ln -sf librowan.so.0.1 $(DESTDIR)$(LIBDIR)/librowan.so.0
	ln -sf librowan.so.0.1 $(DESTDIR)$(LIBDIR)/librowan.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' rdma/client/rowan.pc.in \
	  > $(DESTDIR)$(LIBDIR)/pkgconfig/rowan.pc

.PHONY: lib install
-include $(CLIENT_OBJ:.o=.d)
# rowan-bench --transport native links librowan (utils/bench/native.c)
$(BENCH_BIN) $(BENCH_UNIT): $(CLIENT_A)
# tests/unit/test-librowan.c: the client library against a scripted fake
# server built from the codec alone (the server's archive has its own
# rowanCommand, the ROWAN command, so it is not linked in).
$(BUILD)/tests/test-librowan: $(BUILD)/tests/unit/test-librowan.o $(BUILD)/rdma/dgram.o \
                              $(BUILD)/src/base/hash.o $(CLIENT_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(CLIENT_LIBS)
# tests/integration/test_librowan.py runs the C test program next to the server
integration: $(CLIENT_TEST)
