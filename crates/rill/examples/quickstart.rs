//! The log's quick example: ensure the topic `quickstart/orders` with 2 partitions,
//! publish orders as JSON, read them back with a named cursor and print each total.
//!
//! Embedded (no server): `cargo run -p rill --example quickstart`
//! Against a server:     `cargo run -p rill --example quickstart -- rill://127.0.0.1:7171`
//!
//! The topic is the example's own (the README's CLI quickstart fills `shop/orders` with
//! plain text, which is no JSON order), and so is the cursor file of each target
//! (`quickstart-cursor-rust-embedded.json`, `quickstart-cursor-rust-127.0.0.1_7171.json`):
//! one target's position means nothing in another's log.

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use rill::{Client, Offsets};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u32,
    customer: String,
    total: f64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1);
    let rill = match &url {
        Some(url) => Client::connect(url).await?,
        None => Client::open("./quickstart-data").await?,
    };
    let orders = rill.stream("quickstart").topic("orders");
    orders.ensure(2).await?;

    let typed = orders.json::<Order>();
    for id in 1..=5 {
        let order = Order {
            id,
            customer: format!("customer-{}", id % 2),
            total: 10.0 * f64::from(id),
        };
        // Orders of one customer keep their order: they share a partition.
        let at = typed.publish_keyed(order.customer.clone(), &order).await?;
        println!(
            "published order {id} at partition {} offset {}",
            at.partition, at.offset
        );
    }

    // A named cursor: the position is ours to keep (here, in a file of this target's).
    let cursor = cursor_file(url.as_deref());
    let saved = std::fs::read_to_string(&cursor)
        .ok()
        .and_then(|s| serde_json::from_str::<Offsets>(&s).ok())
        .unwrap_or_default();
    let mut reader = typed.records("quickstart")?.from_offsets(saved);
    while let Some(record) = reader.next().await {
        let record = record?;
        println!(
            "order {} of {}: total {:.2}",
            record.value.id, record.value.customer, record.value.total
        );
    }
    std::fs::write(&cursor, serde_json::to_string(&reader.offsets())?)?;
    rill.close().await?;
    Ok(())
}

/// The cursor file of a target: `embedded`, or the server's address.
fn cursor_file(url: Option<&str>) -> String {
    let target = url.map_or_else(
        || "embedded".to_owned(),
        |url| {
            let addr = url.split_once("://").map_or(url, |(_, rest)| rest);
            addr.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_")
        },
    );
    format!("./quickstart-cursor-rust-{target}.json")
}
