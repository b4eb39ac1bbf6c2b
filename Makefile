# The two commands: `make demo` and `make test`. Both bring the local
# infrastructure up first (installing what is missing) and are idempotent.

CARGO ?= cargo
# The demo runs the tests' build (one build for both on a fresh machine);
# the benchmarks run optimised binaries (make bench builds them itself).
PROFILE ?= dev
TEST_THREADS ?= 4

.PHONY: lint sqlx-check sqlx-prepare compile compile-tests servers-and-tools help infra-up infra-down infra-status build-deps test-tools build test demo deploy-render deploy-check image chaos bench soak upgrade-test clean-data cluster-up chaos-cluster chaos-cluster-short demo-cluster bench-cluster redis-cluster-up test-redis-cluster chaos-redis-cluster chaos-redis-cluster-short bench-redis-cluster postgres-ha-up chaos-pg chaos-pg-short fuzz-long test-code test-stress

help:
	@echo "make demo    bring infra up, start the services, run a flash sale under load, print the reconciliation"
	@echo "make test    bring infra up and run every test against the real Redis, Kafka and PostgreSQL"
	@echo "make lint    rustfmt, gofmt + go vet, ruff, clippy -D warnings, rustdoc links; installs no server (also part of make test)"
	@echo "make bench   benchmarks against ceilings measured in the same run (writes BENCHMARKS.md)"
	@echo "make upgrade-test  a rolling upgrade from the previous landed version under a sale (UPGRADE_FROM)"
	@echo "make soak    the pipeline under steady load, every service's memory over time (SOAK_SECONDS, SOAK_RATE)"
	@echo "make chaos   the fault-injection suite (stops and starts the shared servers; a few minutes)"
	@echo "make chaos-cluster | demo-cluster | bench-cluster   the same on the replicated topology (up.sh --cluster)"
	@echo "make test-redis-cluster | chaos-redis-cluster | bench-redis-cluster   on a Redis Cluster (up.sh --redis-cluster)"
	@echo "make chaos-pg   PostgreSQL's primary and standby killed, frozen and cut off under load (up.sh --postgres-ha: pg_auto_failover)"
	@echo "make fuzz-long Schemathesis against api/openapi.json, 500 cases an operation (make test runs 30)"
	@echo "make test-code the tests that read the code and the docs (the map, its rules, file sizes): no servers"
	@echo "make test-stress the suite of make test's first stage on a busy machine: every core kept busy, test threads doubled"
	@echo "make deploy-render | deploy-check   the Kubernetes manifests, rendered / validated offline"
	@echo "make image   the container image (podman; see infra/image/build.sh)"
	@echo "make infra-up | infra-down | infra-status"

infra-up:
	infra/local/up.sh

infra-down:
	infra/local/down.sh

infra-status:
	infra/local/status.sh

# System packages the build needs (installed once, when missing).
build-deps:
	infra/local/build-deps.sh

# Test tools (a virtualenv under .data/, and Chromium): Schemathesis,
# hadolint, Playwright.
test-tools:
	infra/local/test-tools.sh

build: build-deps
	$(MAKE) compile

# The compile alone (its system packages installed first).
compile:
	$(CARGO) build --workspace --bins $(if $(filter release,$(PROFILE)),--release,)

# The tests' compile: the binaries the tests start, and the tests.
compile-tests:
	$(CARGO) build --workspace --bins --tests

# The servers (the Redis Cluster too: tests/e2e/redis_cluster.rs) and the
# test tools, one apt-get at a time.
servers-and-tools: infra-up
	infra/local/up.sh --redis-cluster
	$(MAKE) test-tools

# On a fresh machine the servers install and start (mostly waiting on the
# network and the disk) while the code compiles (mostly the CPU): the two
# run side by side once the build's own packages are in.
test: build-deps
	$(MAKE) -j2 --output-sync=target servers-and-tools compile-tests
	$(MAKE) lint sqlx-check
	infra/local/clean-test-data.sh
	$(CARGO) test --workspace -- --test-threads=$(TEST_THREADS)
	$(MAKE) test-redis-cluster
	$(MAKE) chaos-redis-cluster-short
	infra/local/clean-test-data.sh
	infra/local/down.sh --redis-cluster
	$(MAKE) chaos-pg-short
	infra/local/down.sh --postgres-ha
	$(MAKE) deploy-check
	$(MAKE) chaos-cluster-short

# The suite make test runs first, on a machine busy with other work: one
# `yes > /dev/null` per core beside it (infra/local/busy.sh) and twice the
# test threads. Not part of CI: it shows that no test depends on how fast
# this machine is (a test that places a fault by a sleep fails here first).
test-stress: build-deps
	$(MAKE) -j2 --output-sync=target servers-and-tools compile-tests
	infra/local/clean-test-data.sh
	infra/local/busy.sh $(CARGO) test --workspace -- --test-threads=$$(( $(TEST_THREADS) * 2 ))
	infra/local/clean-test-data.sh

# The tests that read the code and the docs (the map, the rules, the
# sizes, every path and link): no server needed, a second once compiled.
# make test runs them too.
test-code: build-deps
	$(CARGO) test --test code

# Schemathesis against api/openapi.json runs in make test, bounded (30
# cases an operation in each phase: tests/e2e/fuzz.rs). Longer:
# make fuzz-long (500 cases an operation, up to 15 minutes; another seed
# with FUZZ_ARGS="--seed 7", any schemathesis run option the same way).
FUZZ_ARGS ?=
fuzz-long: infra-up test-tools
	$(CARGO) build --workspace --bins --tests
	SCHEMATHESIS_ARGS="--max-examples 500 --max-time 900 $(FUZZ_ARGS)" \
	  $(CARGO) test --test e2e fuzz::schemathesis -- --nocapture

# The lint, before anything is installed or started (.ci/run runs it
# first): the quick checks before the compiling ones, so a complaint comes
# in seconds — rustfmt, gofmt and go vet (deploy/check), ruff (infra/'s
# Python, ruff.toml), then clippy with every warning an error and rustdoc's
# links (intra-doc links that resolve to nothing fail). Only the build's
# own system package (build-deps) and ruff are installed for it.
lint: build-deps
	infra/local/lint-tools.sh
	$(CARGO) fmt --all --check
	@test -z "$$(gofmt -l deploy/check)" || { gofmt -l deploy/check; echo "gofmt: the files above are not formatted"; exit 1; }
	cd deploy/check && go vet ./...
	.data/venv/bin/ruff check .
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" $(CARGO) doc --workspace --no-deps --document-private-items

# The SQL descriptions the build checks queries against (.sqlx/) up to date
# with the migrations (needs PostgreSQL; part of make test).
sqlx-check: infra-up
	infra/local/sqlx.sh check

# After changing a query or a migration: rewrite .sqlx/ (commit it).
sqlx-prepare: infra-up
	infra/local/sqlx.sh prepare

# The Kubernetes manifests of an overlay (deploy/k8s/overlays/$(OVERLAY)),
# rendered by kustomize's library, without a cluster.
OVERLAY ?= local
deploy-render:
	@cd deploy/check && go run . render ../k8s/overlays/$(OVERLAY)

# Every overlay rendered and each object decoded strictly into the
# Kubernetes API types, the deployment's rules, the Compose file against the
# Compose specification, every service binary of both run with
# --check-config and the environment its container gets, the Kubernetes
# commands of docs/deployment.md against the overlay they apply, and the
# Dockerfile linted; offline.
deploy-check: test-tools compile
	cd deploy/check && go vet ./... && go test ./... && go run . check ../k8s/overlays/* -compose ../compose.yaml -docs ../../docs/deployment.md -bin ../../target/$(if $(filter release,$(PROFILE)),release,debug)
	.data/venv/bin/hadolint Dockerfile

# The container image, built with podman where there is no Docker engine
# (bases made locally when no registry can be reached): infra/image/build.sh.
image:
	infra/image/build.sh

demo: build-deps
	$(MAKE) -j2 --output-sync=target infra-up compile
	PROFILE=$(PROFILE) infra/demo.sh

# Benchmarks with their ceilings measured in the same run: BENCHMARKS.md.
bench: infra-up build-deps test-tools
	infra/local/bench-tools.sh
	command -v redis-benchmark >/dev/null && command -v pgbench >/dev/null
	$(CARGO) build --release --workspace --bins --examples
	.data/venv/bin/python infra/bench.py

# The pipeline under a steady load of distinct buyers, every service's
# memory sampled (SOAK_SECONDS, SOAK_RATE); runs alone, like bench.
soak: infra-up build-deps
	$(CARGO) build --release --workspace --bins
	python3 infra/soak.py

# A rolling upgrade from the previous landed version (infra/upgrade/FROM, or
# UPGRADE_FROM) while a sale runs: nothing lost, oversold or duplicated,
# every event relayed. Builds the old version once (target/upgrade/).
upgrade-test: infra-up build-deps
	$(CARGO) build --workspace --bins
	python3 infra/upgrade_test.py

# Kills and stops every part under load; runs alone (it stops shared servers).
chaos: infra-up build-deps
	$(CARGO) build --workspace --bins
	infra/local/clean-test-data.sh
	$(CARGO) test --features chaos --test chaos -- --nocapture --test-threads=1

# The replicated topology: three Kafka brokers, Redis with Sentinel, HAProxy
# in front of two edges (infra/local/cluster.sh). It takes the single-node
# servers' ports; `make test` and `make demo` switch back by themselves.
cluster-up:
	infra/local/up.sh --cluster

chaos-cluster: cluster-up build-deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --features chaos-cluster --test chaos_cluster -- --nocapture --test-threads=1 --exact chaos_cluster

# The short version `make test` ends with (it switches to the replicated
# topology; `make demo` and `make test` switch back by themselves). No
# backtrace: a failure's message names the broken promise and ends with the
# services' last warnings, which a backtrace would push out of a CI excerpt.
chaos-cluster-short: cluster-up build-deps
	$(CARGO) build --workspace --bins
	RUST_BACKTRACE=0 $(CARGO) test --features chaos-cluster --test chaos_cluster -- --nocapture --test-threads=1 --exact chaos_cluster_short chaos_cluster_short_draw chaos_cluster_short_release

# The Redis Cluster topology (infra/local/redis_cluster.sh): the single
# Kafka and PostgreSQL, a Redis Cluster of three primaries with a replica
# each on :7000-7005.
redis-cluster-up:
	infra/local/up.sh --redis-cluster

# The e2e suite against the Redis Cluster (SECKILL_TEST_REDIS_URL), but for
# thirteen tests of the single Redis: eight put a TCP proxy in front of
# :6379 (a cluster client finds the nodes by itself, past any proxy), four
# need a Redis without a replica (a warm-up or an entry no replica confirms). Their cluster counterparts are in
# chaos-redis-cluster-short: the slot's replica frozen, its primary killed.
# One reads every key of one Redis (KEYS): where the draw keeps its seed
# does not depend on the topology.
REDIS_CLUSTER_SKIP = --skip promise::a_deduction_that_ran_later_is_voided_and_its_buyers_were_not_promised \
  --skip admission_settles::a_lost_claim_reply_leaves_the_buyer_a_way_in \
  --skip promise::a_503_comes_only_once_the_void_has_landed \
  --skip promise_publish::a_rollback_that_did_not_undo_the_order_answers_the_order \
  --skip warmup_job::a_client_that_hangs_up_does_not_cut_a_warm_up_in_half \
  --skip warmup_job::a_half_done_warm_up_is_named_and_finished_by_repeating_it \
  --skip promise::a_deduction_no_replica_confirmed_is_undone \
  --skip promise::a_deduction_whose_answer_was_not_heard_is_asked_again \
  --skip promise::a_full_queue_refuses_at_once_and_keeps_nothing \
  --skip warmup_job::a_warm_up_no_replica_confirmed_is_not_answered_200 \
  --skip draw_entries::an_entry_no_replica_confirmed_is_not_answered_200 \
  --skip draw_entries::nobody_reading_redis_before_the_draw_finds_its_seed \
  --skip warmup_resume::a_close_replaces_a_warm_up_cut_short
test-redis-cluster: redis-cluster-up build-deps
	$(CARGO) build --workspace --bins --tests
	SECKILL_TEST_REDIS_URL=redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \
	  $(CARGO) test --test e2e -- --test-threads=$(TEST_THREADS) $(REDIS_CLUSTER_SKIP)

chaos-redis-cluster: redis-cluster-up build-deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --features chaos-redis-cluster --test chaos_redis_cluster -- --nocapture --test-threads=1 --exact chaos_redis_cluster

# PostgreSQL with failover (infra/local/postgres_ha.sh): pg_auto_failover's
# monitor on :5440, a primary and a synchronous standby on :5441 and
# :5442; Redis and Kafka the single-node ones. make chaos-pg kills,
# freezes (SIGSTOP) and cuts off (a proxy holding every answer) its nodes
# under load (nine scenarios, tests/chaos_pg.rs); make test runs the short
# one (the primary cut off), a warm-up and a close meeting a frozen primary,
# and stops the formation after.
postgres-ha-up:
	infra/local/up.sh --postgres-ha

chaos-pg: postgres-ha-up build-deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --features chaos-pg --test chaos_pg -- --nocapture --test-threads=1 --exact chaos_pg

chaos-pg-short: postgres-ha-up build-deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --features chaos-pg --test chaos_pg -- --nocapture --test-threads=1 --exact chaos_pg_short chaos_pg_short_warm_up_and_close

chaos-redis-cluster-short: redis-cluster-up build-deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --features chaos-redis-cluster --test chaos_redis_cluster -- --nocapture --test-threads=1 short_

# One hot sale's deductions per second and each node's CPU per order, on the
# single Redis and on the Redis Cluster (shared/examples/hot_sale.rs); then
# the hot-SKU burst through an edge on the cluster, the sale in 1 and in 3
# buckets (infra/bench_buckets.py).
bench-redis-cluster: redis-cluster-up build-deps
	infra/local/up.sh redis
	$(CARGO) build --release -p seckill-shared --example hot_sale
	target/release/examples/hot_sale redis://127.0.0.1:6379/0 10 32 16 1 .data/redis/redis.pid
	for buckets in 1 2 3; do \
	  target/release/examples/hot_sale redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 10 32 16 $$buckets \
	    $(foreach port,7000 7001 7002 7003 7004 7005,.data/redis-cluster/$(port)/redis.pid) || exit 1; \
	done
	$(CARGO) build --release --workspace --bins
	python3 infra/bench_buckets.py

demo-cluster: cluster-up build
	PROFILE=$(PROFILE) infra/demo.sh --cluster

bench-cluster: cluster-up build-deps
	$(CARGO) build --release --workspace --bins --examples
	infra/bench_cluster.py

# Stops the servers and deletes their data (the next `make` starts afresh).
clean-data: infra-down
	rm -rf .data
