//! The derive macros: stable key bytes, tags from names, the attributes of an event.

use rill_events::{
    Algebra, AlgebraKind, BodyCodec, Event, EventKey, KeyError, Ordering, Semigroup, tag_for_name,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, EventKey)]
#[event_key(topic = "orders")]
struct OrderId(u64);

#[derive(Debug, Clone, PartialEq, Eq, EventKey)]
#[event_key(topic = "accounts")]
struct Account {
    region: String,
    number: u32,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(name = "order-placed", ordering = Acquire)]
struct OrderPlaced {
    #[event(key)]
    order: OrderIdBody,
    total: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(tag = 7, algebra = Associative, codec = msgpack)]
struct PaymentReceived {
    #[event(key)]
    order: OrderIdBody,
    amount: u64,
}

/// A key that is also part of a body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "orders")]
struct OrderIdBody(u64);

impl Semigroup for PaymentReceived {
    fn combine(self, next: Self) -> Self {
        Self {
            order: self.order,
            amount: self.amount + next.amount,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(ordering_with = ordering_of)]
struct Shipped {
    #[event(key)]
    order: OrderIdBody,
    last: bool,
}

impl Shipped {
    fn ordering_of(&self) -> Ordering {
        if self.last {
            Ordering::Release
        } else {
            Ordering::Relaxed
        }
    }
}

#[test]
fn derived_keys_have_stable_bytes_and_decode_back() {
    assert_eq!(OrderId::TOPIC, "orders");
    assert_eq!(OrderId(17).encode(), [0, 0, 0, 0, 0, 0, 0, 17]);
    assert_eq!(OrderId::decode(&[0, 0, 0, 0, 0, 0, 0, 17]), Ok(OrderId(17)));
    assert!(OrderId::decode(&[0, 17]).is_err());
    let a = Account {
        region: "eu".into(),
        number: 3,
        name: "ada".into(),
    };
    let bytes = a.encode();
    assert_eq!(bytes, b"\0\0\0\x02eu\0\0\0\x03ada");
    assert_eq!(Account::decode(&bytes), Ok(a));
    assert_eq!(
        Account::decode(b"\0\0\0\x02eu\0\0"),
        Err(KeyError::Truncated { needed: 2 })
    );
}

#[test]
fn derived_events_carry_their_attributes() {
    assert_eq!(OrderPlaced::TAG, tag_for_name("order-placed"));
    assert_eq!(OrderPlaced::ORDERING, Ordering::Acquire);
    assert_eq!(OrderPlaced::CODEC, BodyCodec::Json);
    assert_eq!(
        <<OrderPlaced as Event>::Algebra as AlgebraKind<OrderPlaced>>::ALGEBRA,
        Algebra::NonAssociative
    );
    let placed = OrderPlaced {
        order: OrderIdBody(5),
        total: 9,
    };
    assert_eq!(placed.key(), OrderIdBody(5));
    assert_eq!(placed.body(), &placed);
    assert_eq!(placed.ordering(), Ordering::Acquire);

    assert_eq!(PaymentReceived::TAG, 7);
    assert_eq!(PaymentReceived::CODEC, BodyCodec::MsgPack);
    assert_eq!(
        <<PaymentReceived as Event>::Algebra as AlgebraKind<PaymentReceived>>::ALGEBRA,
        Algebra::Associative
    );

    // Without a name, the type's name.
    assert_eq!(Shipped::TAG, tag_for_name("Shipped"));
    let s = |last| Shipped {
        order: OrderIdBody(1),
        last,
    };
    assert_eq!(s(true).ordering(), Ordering::Release);
    assert_eq!(s(false).ordering(), Ordering::Relaxed);
}
