//! The tests that read the code and the docs — the map's arrows, the rules,
//! the sizes, every path and link the docs name — in a binary of their own:
//! they need no server, so `cargo test --test code` runs them anywhere, in
//! a second.

#[path = "code/answer_tables.rs"]
mod answer_tables;
#[path = "code/architecture.rs"]
mod architecture;
#[path = "code/code_map.rs"]
mod code_map;
#[path = "code/code_rules.rs"]
mod code_rules;
#[path = "code/code_size.rs"]
mod code_size;
#[path = "code/docs_addresses.rs"]
mod docs_addresses;
#[path = "code/downstream_page.rs"]
mod downstream_page;
#[path = "code/module_graph.rs"]
mod module_graph;
#[path = "code/script_protocol.rs"]
mod script_protocol;
#[path = "code/test_rules.rs"]
mod test_rules;
#[path = "code/wiring_map.rs"]
mod wiring_map;
