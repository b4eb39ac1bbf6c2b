//! The operators' routes are on their own address: every table of the docs
//! that lists an `/admin/…` route says so at its first such row
//! (`admin_addr`), so nobody calls them on the buyers' address and gets 404.

use crate::code_map::read;

/// The first row naming an `/admin/…` route of each table in `text`, if it
/// does not name `admin_addr`.
fn admin_rows_without_their_address(text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut said = false;
    for line in text.lines() {
        if !line.starts_with('|') {
            said = false;
            continue;
        }
        let names_admin =
            ["`GET /admin/", "`PUT /admin/", "`POST /admin/", "`DELETE /admin/"].iter().any(|r| line.contains(r));
        if names_admin && !said {
            if !line.contains("admin_addr") {
                wrong.push(line.chars().take(80).collect());
            }
            said = true;
        }
    }
    wrong
}

#[test]
fn every_table_of_admin_routes_says_they_answer_on_admin_addr() {
    let root = seckill_e2e::repo_root();
    let mut pages = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        pages.push(format!("docs/{}", entry.expect("a page").file_name().to_string_lossy()));
    }
    let mut tables = 0;
    for page in pages.iter().filter(|p| p.ends_with(".md")) {
        let text = read(page);
        tables += text.lines().filter(|l| l.starts_with("| `PUT /admin/")).count();
        let wrong = admin_rows_without_their_address(&text);
        assert!(wrong.is_empty(), "{page}: admin routes listed without their address: {wrong:?}");
    }
    assert!(tables >= 2, "the README and docs/buyers-api.md list the warm-up");
}

#[test]
fn a_table_listing_admin_routes_on_the_buyers_address_is_caught() {
    let old = "| route | answer |\n|---|---|\n| `PUT /admin/sales/{a}/{s}` | warm-up |\n| `GET /admin/sales/{a}/{s}` | report |\n";
    assert_eq!(admin_rows_without_their_address(old).len(), 1);
    let now = "| `PUT /admin/sales/{a}/{s}` (on `admin_addr`) | warm-up |\n| `GET /admin/sales/{a}/{s}` | report |\n";
    assert!(admin_rows_without_their_address(now).is_empty());
}
