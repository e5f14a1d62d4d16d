//! The derive macros work through the facade alone (`rill::events`), with no direct
//! dependency on `rill-events`.

use rill::events::{Event, EventKey, Ordering, tag_for_name};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "orders")]
struct OrderId(u64);

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "order-placed", ordering = Acquire)]
struct OrderPlaced {
    #[event(key)]
    order: OrderId,
}

#[test]
fn derives_resolve_through_the_facade() {
    let e = OrderPlaced { order: OrderId(3) };
    assert_eq!(e.key().encode(), 3u64.to_be_bytes());
    assert_eq!(OrderPlaced::TAG, tag_for_name("order-placed"));
    assert_eq!(e.ordering(), Ordering::Acquire);
    assert_eq!(<OrderId as EventKey>::TOPIC, "orders");
}
