//! Typed events (docs/EVENTS.md): orders and their payments, keyed by order id.
//!
//! `OrderPlaced` is Acquire: nothing later of its order overtakes it, so a payment is
//! never applied before its order. `PaymentReceived` is Associative: the payments of one
//! order that arrive together fold into one call. Two handlers are built from one shared
//! store; a publisher publishes, a consumer applies, and Ctrl-C (or the end of the demo)
//! shuts it down within 5 s.
//!
//! Embedded (no server): `cargo run -p rill --example events_orders`
//! Against a server:     `cargo run -p rill --example events_orders -- rill://127.0.0.1:7171`

// An example: printing is what it is for.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill::Client;
use rill::events::{
    Assignment, ConsumerConfig, Context, Event, EventHandler, EventKey, HandleError, Handlers,
    Publisher, Semigroup,
};
use serde::{Deserialize, Serialize};

/// Events keyed by an order id live in the topic `orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "orders")]
struct OrderId(u64);

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "order-placed", ordering = Acquire)]
struct OrderPlaced {
    #[event(key)]
    order: OrderId,
    total_cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "payment-received", algebra = Associative)]
struct PaymentReceived {
    #[event(key)]
    order: OrderId,
    cents: u64,
}

impl Semigroup for PaymentReceived {
    fn combine(self, next: Self) -> Self {
        Self {
            order: self.order,
            cents: self.cents + next.cents,
        }
    }
}

/// The application's state: per order, its total and what was paid.
#[derive(Debug, Default)]
struct Store {
    orders: Mutex<BTreeMap<u64, (u64, u64)>>,
}

/// What handlers are built from.
struct Deps {
    store: Arc<Store>,
}

struct RecordOrder(Arc<Store>);

impl EventHandler<OrderPlaced> for RecordOrder {
    const MAX_BATCH: usize = 100;

    async fn handle(&self, _: &Context, run: &[OrderPlaced]) -> Result<(), HandleError> {
        let mut orders = self.0.orders.lock().expect("the store's lock");
        for o in run {
            orders.entry(o.order.0).or_default().0 = o.total_cents;
        }
        Ok(())
    }
}

struct ApplyPayment(Arc<Store>);

impl EventHandler<PaymentReceived> for ApplyPayment {
    const MAX_BATCH: usize = 100;

    async fn handle(&self, ctx: &Context, run: &[PaymentReceived]) -> Result<(), HandleError> {
        let mut orders = self.0.orders.lock().expect("the store's lock");
        for p in run {
            let Some(order) = orders.get_mut(&p.order.0) else {
                // Cannot happen with OrderPlaced Acquire; say so rather than lose it.
                return Err(HandleError::retryable(format!(
                    "order {} is unknown",
                    p.order.0
                )));
            };
            order.1 += p.cents;
        }
        println!(
            "order {}: applied {} cents in one call (offsets {:?})",
            ctx.key::<OrderId>().map_or(0, |k| k.0),
            run.iter().map(|p| p.cents).sum::<u64>(),
            ctx.offsets()
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = match std::env::args().nth(1) {
        Some(url) => Client::connect(&url).await?,
        None => Client::open("./events-data").await?,
    };
    client
        .stream("shop")
        .topic(OrderId::TOPIC)
        .create_with(&rill::TopicOptions::partitions(2), true)
        .await?;

    let publisher = Publisher::new(&client, "shop");
    for id in 1..=3u64 {
        publisher
            .publish(&OrderPlaced {
                order: OrderId(id),
                total_cents: 3000 * id,
            })
            .await?;
        // Three instalments, published together: they fold into one call.
        let payments: Vec<PaymentReceived> = (0..3)
            .map(|_| PaymentReceived {
                order: OrderId(id),
                cents: 1000 * id,
            })
            .collect();
        publisher.publish_batch(&payments).await?;
    }
    publisher.close().await?;

    let deps = Deps {
        store: Arc::new(Store::default()),
    };
    let store = Arc::clone(&deps.store);
    let consumer = Handlers::with(deps)
        .on::<OrderPlaced, _>(|d| RecordOrder(Arc::clone(&d.store)))
        .on::<PaymentReceived, _>(|d| ApplyPayment(Arc::clone(&d.store)))
        .start(
            &client,
            ConsumerConfig::new("shop", "accounting", Assignment::Partitions(vec![0, 1])),
        )
        .await?;

    // Until every order is paid in full (a second run finds them paid already), or
    // Ctrl-C.
    let paid = async {
        loop {
            {
                let orders = store.orders.lock().expect("the store's lock");
                if orders.len() == 3 && orders.values().all(|(total, paid)| paid >= total) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = paid => println!("every order is paid"),
        _ = tokio::signal::ctrl_c() => println!("interrupted"),
        () = tokio::time::sleep(Duration::from_secs(10)) => println!("nothing more arrived within 10 s (a run after the first finds its events consumed)"),
    }
    for (p, ended) in consumer.shutdown(Duration::from_secs(5)).await {
        println!("partition {p}: {ended:?}");
    }
    for (id, (total, paid)) in store.orders.lock().expect("the store's lock").iter() {
        println!("order {id}: total {total}, paid {paid}");
    }
    client.close().await?;
    Ok(())
}
