//! NATS JetStream driver: async publishes, pull consumers, file storage, one replica.

use crate::measure::RunResult;
use crate::workload::{Durability, Workload};

/// The storage setting a durability class runs with; `None` for fsync before ack, which
/// nats-server 2.9 cannot do.
pub(crate) fn setting(durability: Durability) -> Option<String> {
    match durability {
        Durability::Buffered => Some("JetStream file storage, 1 replica".into()),
        Durability::Fsync => None,
    }
}

pub(crate) async fn run(workload: &Workload) -> anyhow::Result<RunResult> {
    anyhow::bail!("nats driver not written yet ({})", workload.name)
}
