//! End-to-end tests against the real Redis, Kafka and PostgreSQL started by
//! `infra/local/up.sh` (`make test` starts them). One binary, one module per
//! area, so the suite links once.

#[path = "e2e/admin_access.rs"]
mod admin_access;
#[path = "e2e/admission_settles.rs"]
mod admission_settles;
#[path = "e2e/batching.rs"]
mod batching;
#[path = "e2e/browser.rs"]
mod browser;
#[path = "e2e/bucket_sales.rs"]
mod bucket_sales;
#[path = "e2e/buckets.rs"]
mod buckets;
#[path = "e2e/chaos_short.rs"]
mod chaos_short;
#[path = "e2e/cheating_clients.rs"]
mod cheating_clients;
#[path = "e2e/cli.rs"]
mod cli;
#[path = "e2e/cloud_events.rs"]
mod cloud_events;
#[path = "e2e/compensator.rs"]
mod compensator;
#[path = "e2e/contract.rs"]
mod contract;
#[path = "e2e/contract_auth.rs"]
mod contract_auth;
#[path = "e2e/created_events.rs"]
mod created_events;
#[path = "e2e/ctl.rs"]
mod ctl;
#[path = "e2e/dashboard.rs"]
mod dashboard;
#[path = "e2e/db_bounds.rs"]
mod db_bounds;
#[path = "e2e/db_primary.rs"]
mod db_primary;
#[path = "e2e/deadlines.rs"]
mod deadlines;
#[path = "e2e/dlq_index.rs"]
mod dlq_index;
#[path = "e2e/dlq_page.rs"]
mod dlq_page;
#[path = "e2e/dlq_tools.rs"]
mod dlq_tools;
#[path = "e2e/docs_commands.rs"]
mod docs_commands;
#[path = "e2e/docs_names.rs"]
mod docs_names;
#[path = "e2e/downstream.rs"]
mod downstream;
#[path = "e2e/draw.rs"]
mod draw;
#[path = "e2e/draw_entries.rs"]
mod draw_entries;
#[path = "e2e/draw_faults.rs"]
mod draw_faults;
#[path = "e2e/draw_makers.rs"]
mod draw_makers;
#[path = "e2e/edge.rs"]
mod edge;
#[path = "e2e/fatal_producers.rs"]
mod fatal_producers;
#[path = "e2e/finished_sales.rs"]
mod finished_sales;
#[path = "e2e/fuzz.rs"]
mod fuzz;
#[path = "e2e/identity.rs"]
mod identity;
#[path = "e2e/infra_checkouts.rs"]
mod infra_checkouts;
#[path = "e2e/lifecycle.rs"]
mod lifecycle;
#[path = "e2e/lock.rs"]
mod lock;
#[path = "e2e/metrics_at_start.rs"]
mod metrics_at_start;
#[path = "e2e/observability.rs"]
mod observability;
#[path = "e2e/one_bad_sale.rs"]
mod one_bad_sale;
#[path = "e2e/order.rs"]
mod order;
#[path = "e2e/payments.rs"]
mod payments;
#[path = "e2e/poison.rs"]
mod poison;
#[path = "e2e/promise.rs"]
mod promise;
#[path = "e2e/promise_publish.rs"]
mod promise_publish;
#[path = "e2e/quantities.rs"]
mod quantities;
#[path = "e2e/quantity_returns.rs"]
mod quantity_returns;
#[path = "e2e/redis_cluster.rs"]
mod redis_cluster;
#[path = "e2e/relay.rs"]
mod relay;
#[path = "e2e/relay_held_back.rs"]
mod relay_held_back;
#[path = "e2e/releases.rs"]
mod releases;
#[path = "e2e/sale_in_buckets.rs"]
mod sale_in_buckets;
#[path = "e2e/slow_clients.rs"]
mod slow_clients;
#[path = "e2e/smoke.rs"]
mod smoke;
#[path = "e2e/stalled_consumer.rs"]
mod stalled_consumer;
#[path = "e2e/status_reads.rs"]
mod status_reads;
#[path = "e2e/tracing_export.rs"]
mod tracing_export;
#[path = "e2e/upgrade.rs"]
mod upgrade;
#[path = "e2e/waiting_room.rs"]
mod waiting_room;
#[path = "e2e/waiting_room_entry.rs"]
mod waiting_room_entry;
#[path = "e2e/warmup_job.rs"]
mod warmup_job;
#[path = "e2e/warmup_resume.rs"]
mod warmup_resume;
