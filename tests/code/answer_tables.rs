//! The tables of how an order request ends and of a waiting-room ticket's
//! states are shown by the docs exactly as the code defines them
//! (`OrderAnswer::table`, `TicketState::table`), and every code of
//! `lua/deduct.lua` has its row.

use crate::code_map::read;
use seckill_edge::order_answers::OrderAnswer;
use seckill_shared::stock::protocol::{deduct, TicketState};

#[test]
fn the_docs_show_the_order_table_and_the_ticket_states_as_the_code_defines_them() {
    let table = OrderAnswer::table();
    for doc in ["docs/buyers-api.md", "ARCHITECTURE.md"] {
        assert!(read(doc).contains(&table), "{doc} does not show OrderAnswer::table() as it is now:\n{table}");
    }
    let states = TicketState::table();
    assert!(read("docs/buyers-api.md").contains(&states), "docs/buyers-api.md lacks TicketState::table():\n{states}");
}

#[test]
fn every_deduction_code_ends_in_a_row_of_the_table() {
    for (code, name, _) in deduct::ANSWERS.codes {
        let answer = OrderAnswer::of_deduction(*code).unwrap_or_else(|| panic!("deduct.lua's {code} {name}: no row"));
        assert!(OrderAnswer::table().contains(&format!("{code} {name}")), "{answer:?}");
    }
    // Every answer is a row, every row an answer.
    let rows = OrderAnswer::table().lines().skip(2).count();
    assert_eq!(rows, OrderAnswer::ALL.len());
}
