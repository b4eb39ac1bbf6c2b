//! docs/downstream.md, the page a downstream team builds on, against the
//! code: every topic it names is one the services create, each of those is
//! named and counted right, the partition counts it gives are the
//! defaults, and every order event type the schema names is on the page.

use crate::code_map::read;
use seckill_shared::config::KafkaSettings;
use seckill_shared::kafka::Topics;

const PAGE: &str = "docs/downstream.md";

/// Every `seckill.…` topic name the text names (in backticks).
fn topics_named(text: &str) -> Vec<String> {
    let mut found: Vec<String> =
        text.split('`').skip(1).step_by(2).filter(|q| q.starts_with("seckill.")).map(str::to_owned).collect();
    found.sort();
    found.dedup();
    found
}

/// The upper-case words (4 letters or more) of `text`.
fn upper_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.len() >= 4 && w.chars().any(|c| c.is_ascii_uppercase()))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_downstream_page_names_the_topics_partitions_and_event_types_there_are() {
    let page = read(PAGE);
    let defaults = KafkaSettings::default();
    let topics = Topics::new(&defaults);
    let real = [&topics.orders, &topics.dlq, &topics.events, &topics.draw_events];
    for named in topics_named(&page) {
        assert!(real.contains(&&named), "{PAGE} names a topic the services never create: {named}");
    }
    for topic in real {
        assert!(page.contains(&format!("`{topic}`")), "{PAGE} never names {topic}");
    }
    let count = ["One", "Two", "Three", "Four", "Five", "Six"][real.len() - 1];
    assert!(page.contains(&format!("{count} topics are the contract")), "{PAGE} counts {} topics", real.len());
    assert!(
        page.contains(&format!("({} by\ndefault)", defaults.order_partitions))
            || page.contains(&format!("({} by default)", defaults.order_partitions)),
        "{PAGE} gives the default of kafka.order_partitions, {}",
        defaults.order_partitions
    );
    assert!(page.contains(&format!("`kafka.dlq_partitions` ({})", defaults.dlq_partitions)), "{PAGE}: dlq_partitions");
    // The key a consumer partitions and joins by, as the services write it.
    assert!(page.contains("decimal text"), "{PAGE} says how the key is encoded (the user id as decimal text)");
    let schema: serde_json::Value = serde_json::from_str(&read("schemas/order-events.v1.json")).expect("the schema");
    let types = upper_words(schema["properties"]["type"]["description"].as_str().expect("the types described"));
    assert!(types.len() >= 6, "the schema names the event types: {types:?}");
    for kind in types {
        assert!(page.contains(&format!("`{kind}`")), "{PAGE} never names the event type {kind}");
    }
}

#[test]
fn a_wrong_topic_name_or_a_missing_type_is_caught() {
    assert_eq!(
        topics_named("the `seckill.orders-dlq` topic and `seckill.orders`"),
        ["seckill.orders", "seckill.orders-dlq"]
    );
    assert_eq!(upper_words("CREATED (awaiting), PAYMENT_LATE (a late one), ok"), ["CREATED", "PAYMENT_LATE"]);
}
