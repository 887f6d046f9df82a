# pg_idem: built with PGXS. `make`, `make install`, `make installcheck`
# (against a running server), `make prove_installcheck` (the TAP tests,
# servers of their own), `make unittest` (the C++ core, no server),
# `make format` and `make lintcheck` (clang-format).

EXTENSION = pg_idem
EXTVERSION = 0.3

MODULE_big = pg_idem
CORE_OBJS = \
	src/core/sha256.o \
	src/core/record_key.o \
	src/core/claim_rules.o \
	src/core/canonical_json.o \
	src/core/message_key.o \
	src/core/replay_window.o
OBJS = $(CORE_OBJS) \
	src/pg/module.o \
	src/pg/citus_tables.o \
	src/pg/extension_objects.o \
	src/pg/relation_invalidation.o \
	src/pg/plan_cache.o \
	src/pg/batches.o \
	src/pg/records/records.o \
	src/pg/records/records_layout.o \
	src/pg/records/record_indexes.o \
	src/pg/records/record_statements.o \
	src/pg/records/routes.o \
	src/pg/records/routed_records.o \
	src/pg/records/try_insert.o \
	src/pg/records/try_insert_many.o \
	src/pg/records/operator_tools.o \
	src/pg/scopes/scopes.o \
	src/pg/scopes/scope_grants.o \
	src/pg/claims/claim.o \
	src/pg/claims/claim_tokens.o \
	src/pg/claims/claim_wait.o \
	src/pg/claims/reconcile.o \
	src/pg/claims/reconciler_deadline.o \
	src/pg/purge/purge.o \
	src/pg/purge/purge_status.o \
	src/pg/purge/purge_worker.o \
	src/pg/purge/purge_vacuum.o \
	src/pg/purge/purge_yield.o \
	src/pg/cache/duplicate_cache.o \
	src/pg/cache/duplicate_cache_triggers.o \
	src/pg/cache/duplicate_cache_epochs.o \
	src/pg/stats/stats.o \
	src/pg/user_tables/user_table.o \
	src/pg/user_tables/built_objects.o \
	src/pg/user_tables/try_insert_row.o \
	src/pg/user_tables/versioned_update.o \
	src/pg/user_tables/version_probe.o \
	src/pg/messages/message_keys.o \
	src/pg/messages/stream_positions.o

# SQL: the 0.1 install script as released, and one upgrade script per
# release after it. The current install script is their concatenation (the
# upgrade scripts' \echo guard lines dropped), so that CREATE EXTENSION and
# ALTER EXTENSION UPDATE give the same objects.
UPGRADES = src/$(EXTENSION)--0.1--0.2.sql src/$(EXTENSION)--0.2--0.3.sql
DATA = src/$(EXTENSION)--0.1.sql $(UPGRADES)
DATA_built = $(EXTENSION)--$(EXTVERSION).sql

# The tests, by convention: every test/sql/NAME.sql (expected output in
# test/expected/NAME.out) and every test/isolation/specs/NAME.spec (in
# test/isolation/expected), in alphabetical order. Each file stands alone.
REGRESS = $(patsubst test/sql/%.sql,%,$(sort $(wildcard test/sql/*.sql)))
REGRESS_OPTS = --inputdir=test --load-extension=$(EXTENSION)
ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=$(EXTENSION)

# The PostgreSQL to build for: its pg_config (scripts/lib.sh passes the one
# of the server under test, as pg_config is often not on PATH).
PG_CONFIG ?= pg_config
SUPPORTED_MAJORS = 15 17 18
PG_MAJOR := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
ifeq ($(PG_MAJOR),)
$(error $(PG_CONFIG) does not run: set PG_CONFIG to the pg_config of a PostgreSQL $(SUPPORTED_MAJORS))
endif
ifeq ($(filter $(PG_MAJOR),$(SUPPORTED_MAJORS)),)
$(error pg_idem supports PostgreSQL $(SUPPORTED_MAJORS); $(PG_CONFIG) is PostgreSQL $(PG_MAJOR))
endif
# Objects built for one PostgreSQL are never linked for another (`make
# install PG_CONFIG=...` for 15, then for 17, in one tree): .pg_config
# names the server the objects are built for, and is rewritten, newer than
# every object, when PG_CONFIG names another.
PG_BUILD_ID := $(shell $(PG_CONFIG) --version) at $(shell $(PG_CONFIG) --includedir-server)
ifneq ($(PG_BUILD_ID),$(shell cat .pg_config 2>/dev/null))
$(shell echo '$(PG_BUILD_ID)' >.pg_config)
endif
IDEM_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
# PostgreSQL 15 headers use `register`, which C++17 removed.
PG_IDEM_HEADER_FLAGS = -Wno-register
PG_CPPFLAGS = -Isrc
# -MMD -MP: PGXS tracks no header dependencies for C++, so a changed header
# would otherwise leave objects built against an old layout.
PG_CXXFLAGS = $(IDEM_CXXFLAGS) $(PG_IDEM_HEADER_FLAGS) -MMD -MP
SHLIB_LINK = -lstdc++

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# TAP tests: test/t/*.pl, with their helpers in test/perl, driven by
# PostgreSQL's PostgreSQL::Test::Cluster against the installed pg_idem.
# `make prove_installcheck` runs them as PGXS runs a module's TAP tests
# (PROVE_TESTS=test/t/004_stats.pl for one, PROVE_FLAGS=--verbose); they
# start servers of their own, so they run as a user initdb accepts, not as
# root (scripts/test_tap runs them from root). Not part of `make
# installcheck`, which runs against the server given.
PROVE_TESTS ?= test/t/*.pl
PG_PROVE_FLAGS += -I test/perl
.PHONY: prove_installcheck
prove_installcheck:
ifneq ($(enable_tap_tests),yes)
	$(error the TAP tests need PostgreSQL::Test::Cluster: $(PG_CONFIG)'s PostgreSQL was configured without --enable-tap-tests)
endif
	$(prove_installcheck)

# One look: `make format` formats every C++ file with .clang-format,
# `make lintcheck` fails on one that is not formatted (scripts/test runs it).
# Debian 12's clang-format 14: other releases format some constructs
# differently, so the check names the one the tree was formatted with.
CLANG_FORMAT ?= clang-format-14
FORMAT_FILES = $(sort $(wildcard $(foreach d,src/core src/pg src/pg/* test/unit test/reliability \
	test/reliability/client bench/client,$(d)/*.cpp $(d)/*.hpp $(d)/*.h)))
.PHONY: format lintcheck
format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)
lintcheck:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)

# The JIT bitcode copy of each file must be compiled like the object code.
override BITCODE_CXXFLAGS += $(IDEM_CXXFLAGS) $(PG_IDEM_HEADER_FLAGS)

$(EXTENSION)--$(EXTVERSION).sql: src/$(EXTENSION)--0.1.sql $(UPGRADES)
	{ cat src/$(EXTENSION)--0.1.sql; for u in $(UPGRADES); do sed '/^\\echo /d' $$u; done; } >$@

# Unit tests of the pure C++ core (GoogleTest); no PostgreSQL involved.
UNIT_TESTS = $(wildcard test/unit/*_test.cpp)
CORE_SRCS = $(CORE_OBJS:.o=.cpp)
test/unit/run_unit_tests: $(UNIT_TESTS) $(CORE_SRCS) $(wildcard src/core/*.hpp) $(wildcard test/unit/*.hpp)
	$(CXX) $(IDEM_CXXFLAGS) -O1 -g -Isrc $(UNIT_SANITIZE) -o $@ $(UNIT_TESTS) $(CORE_SRCS) \
		-lgtest -lgtest_main -pthread

.PHONY: unittest
unittest: test/unit/run_unit_tests
	test/unit/run_unit_tests

-include $(OBJS:.o=.d)
$(OBJS) $(OBJS:.o=.bc): .pg_config

EXTRA_CLEAN = .pg_config test/unit/run_unit_tests $(EXTENSION)--$(EXTVERSION).sql $(OBJS:.o=.d)
