//! Consumer groups (`rill_client::GroupConsumer`): the broker assigns partitions to
//! members and moves them as members join, leave or go silent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rill_client::{
    ClientError, GroupConsumer, GroupConsumerBuilder, GroupDescription, Position, Record, Topic,
};

use crate::consumer::{Common, Shared, State, timeout_of, unless_stopped};
use crate::convert::{Kwargs, PyRecord};
use crate::error::to_py;
use crate::runtime::{InRuntime, spawn};

/// Group-member options, as `topic.consumer_group(group, **options)` takes them.
#[derive(Debug, Clone)]
pub(crate) struct GroupOptions {
    common: Common,
    member_id: Option<String>,
    session_timeout_ms: Option<u64>,
    create_group: Option<bool>,
}

impl GroupOptions {
    /// Options from keyword arguments; unknown names and bad values are errors.
    pub(crate) fn from_py(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut kw = Kwargs::new(py, "consumer group", options)?;
        let common = Common::take(&mut kw, py)?;
        let options = Self {
            common,
            member_id: kw.take("member_id")?,
            session_timeout_ms: kw.take("session_timeout_ms")?,
            create_group: kw.take("create_group")?,
        };
        kw.finish()?;
        Ok(options)
    }

    fn builder(&self, topic: &Topic, group: &str) -> GroupConsumerBuilder {
        let c = &self.common;
        let mut b = topic.consumer_group(group);
        if let Some(id) = &self.member_id {
            b = b.member_id(id.clone());
        }
        if let Some(ms) = self.session_timeout_ms {
            b = b.session_timeout(Duration::from_millis(ms));
        }
        if let Some(on) = self.create_group {
            b = b.create_group(on);
        }
        if let Some(n) = c.batch_length {
            b = b.batch_length(n);
        }
        if let Some(ms) = c.poll_interval_ms {
            b = b.poll_interval(Duration::from_millis(ms));
        }
        if let Some(start) = c.start_at {
            b = b.start_at(start);
        }
        if c.allow_replay {
            b = b.allow_replay();
        }
        if let Some(policy) = c.commit_policy {
            b = b.commit_policy(policy);
        }
        if let Some(ms) = c.max_wait_ms {
            b = b.max_wait(Duration::from_millis(ms));
        }
        if let Some(ms) = c.polling_retry_interval_ms {
            b = b.polling_retry_interval(Duration::from_millis(ms));
        }
        b
    }
}

/// A partition as the member knows it.
#[derive(Debug, Clone, Copy, Default)]
struct Owned {
    position: Option<u64>,
    last_consumed: Option<u64>,
    last_stored: Option<u64>,
}

/// What a member reports about itself while a call holds it.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    member_id: String,
    partitions: BTreeMap<u32, Owned>,
}

fn snapshot_of(c: &GroupConsumer) -> Snapshot {
    Snapshot {
        member_id: c.member_id(),
        partitions: c
            .assignment()
            .into_iter()
            .map(|p| {
                let owned = Owned {
                    position: c.position(p),
                    last_consumed: c.last_consumed_offset(p),
                    last_stored: c.last_stored_offset(p),
                };
                (p, owned)
            })
            .collect(),
    }
}

type Parts = (
    Arc<Shared<GroupConsumer>>,
    Arc<parking_lot::Mutex<Snapshot>>,
);

/// A member of a consumer group.
#[pyclass(frozen, module = "rill._native", name = "GroupConsumer")]
#[derive(Debug)]
pub(crate) struct PyGroupConsumer {
    topic: Topic,
    group: String,
    options: GroupOptions,
    shared: Arc<Shared<GroupConsumer>>,
    snapshot: Arc<parking_lot::Mutex<Snapshot>>,
}

impl PyGroupConsumer {
    pub(crate) fn new(topic: Topic, group: String, options: GroupOptions) -> Self {
        Self {
            topic,
            group,
            options,
            shared: Shared::new(),
            snapshot: Arc::new(parking_lot::Mutex::new(Snapshot::default())),
        }
    }

    fn parts(&self) -> Parts {
        (Arc::clone(&self.shared), Arc::clone(&self.snapshot))
    }

    /// The member's state now if no call holds it, else as of the last call.
    fn snapshot_now(&self) -> Snapshot {
        if let Ok(mut state) = self.shared.state.try_lock()
            && let Ok(c) = state.running()
        {
            let now = snapshot_of(c);
            *self.snapshot.lock() = now.clone();
            return now;
        }
        self.snapshot.lock().clone()
    }
}

/// The next record of a member, or `None` once it is shut down.
async fn next(
    shared: &Shared<GroupConsumer>,
    snapshot: &parking_lot::Mutex<Snapshot>,
) -> Result<Option<Record>, ClientError> {
    let Some((mut state, mut stop)) = shared.lock_unless_stopped().await else {
        return Ok(None);
    };
    let c = state.running()?;
    // Records handed out by `try_next` since the last call count for the accessors
    // while this one waits.
    *snapshot.lock() = snapshot_of(c);
    let next = unless_stopped(&mut stop, c.next()).await;
    *snapshot.lock() = snapshot_of(c);
    next.flatten().transpose()
}

#[pymethods]
impl PyGroupConsumer {
    /// The group's name.
    #[getter]
    fn group(&self) -> String {
        self.group.clone()
    }

    /// Joins the group (creating it unless `create_group=False`) and starts
    /// heartbeating. Calling it again does nothing.
    fn init<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let builder = self.options.builder(&self.topic, &self.group);
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            match &*state {
                State::Running(_) => Ok(()),
                State::ShutDown => Err(ClientError::Shutdown),
                State::New => {
                    let consumer = builder.build().await?;
                    *snapshot.lock() = snapshot_of(&consumer);
                    *state = State::Running(InRuntime::new(consumer));
                    Ok(())
                }
            }
        })
    }

    /// The next record of any owned partition, waiting for one; `None` after
    /// `shutdown()` (which also ends a `next()` that is waiting).
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            Ok(next(&shared, &snapshot).await?.map(PyRecord))
        })
    }

    /// The next record if one was fetched already and nothing must be stored first,
    /// without an awaitable; else `None`, and `next()` is needed. Hands out as
    /// `next()` does (`rill_client::GroupConsumer::try_next`).
    fn try_next(&self) -> Option<PyRecord> {
        let mut state = self.shared.try_running()?;
        state.running().ok()?.try_next().map(PyRecord)
    }

    /// Up to `max` records as `try_next` hands them out, in one call (`poll()` in
    /// Python): it stops where a store is due, and an empty list says `next()` is needed.
    fn try_take(&self, max: usize) -> Vec<PyRecord> {
        self.shared.try_take(max, GroupConsumer::try_next)
    }

    /// Like `next()`, raising `TimeoutError` if no record arrives within `timeout`
    /// seconds, and `ShutdownError` after `shutdown()`.
    fn next_within<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout_of(timeout).map_err(|e| to_py(py, e))?;
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            match tokio::time::timeout(timeout, next(&shared, &snapshot)).await {
                Ok(record) => record?.map(PyRecord).ok_or(ClientError::Shutdown),
                Err(_) => Err(ClientError::Timeout(timeout)),
            }
        })
    }

    /// Stores the record at `offset` of `partition` as consumed, fenced by the group's
    /// generation: `NotAssignedError` if the partition moved to another member.
    fn commit<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        offset: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            let c = state.running()?;
            let result = c.store_offset(Position::new(partition, offset)).await;
            *snapshot.lock() = snapshot_of(c);
            result
        })
    }

    /// Deletes the group's stored offset of `partition`, which this member must own.
    fn delete_offset<'py>(&self, py: Python<'py>, partition: u32) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            let c = state.running()?;
            let result = c.delete_offset(partition).await;
            *snapshot.lock() = snapshot_of(c);
            result
        })
    }

    /// Numbers this member reports about itself with each heartbeat (`{name: value}`;
    /// names of `[a-z0-9_]`).
    fn report<'py>(
        &self,
        py: Python<'py>,
        metrics: BTreeMap<String, u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (shared, _) = self.parts();
        spawn(py, async move {
            let mut state = shared.state.lock().await;
            state.running()?.report(metrics)
        })
    }

    /// This member's id (empty before `init()`).
    #[getter]
    fn member_id(&self) -> String {
        self.snapshot_now().member_id
    }

    /// The partitions this member owns.
    fn assignment(&self) -> Vec<u32> {
        self.snapshot_now().partitions.keys().copied().collect()
    }

    /// The offset the member reads `partition` from next, if it owns it.
    fn position(&self, partition: u32) -> Option<u64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.position)
    }

    /// The offset of the last record handed out of `partition`.
    fn last_consumed_offset(&self, partition: u32) -> Option<u64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.last_consumed)
    }

    /// The last offset of `partition` stored as consumed, as this member knows it.
    fn last_stored_offset(&self, partition: u32) -> Option<u64> {
        self.snapshot_now()
            .partitions
            .get(&partition)
            .and_then(|o| o.last_stored)
    }

    /// Stores final offsets as the policy says and leaves the group at once, so the
    /// partitions move to the other members. A waiting `next()` ends. Again: nothing.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (shared, snapshot) = self.parts();
        spawn(py, async move {
            shared.stop();
            let mut state = shared.state.lock().await;
            let result = match &mut *state {
                State::Running(c) => match c.get_mut() {
                    Some(consumer) => {
                        let r = consumer.shutdown().await;
                        *snapshot.lock() = Snapshot {
                            member_id: consumer.member_id(),
                            partitions: BTreeMap::new(),
                        };
                        r
                    }
                    None => Ok(()),
                },
                State::New | State::ShutDown => Ok(()),
            };
            *state = State::ShutDown;
            result
        })
    }
}

/// A consumer group's description as a dict.
#[derive(Debug)]
pub(crate) struct PyGroupDescription(pub(crate) GroupDescription);

impl<'py> IntoPyObject<'py> for PyGroupDescription {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let g = self.0;
        let d = PyDict::new(py);
        d.set_item("generation", g.generation)?;
        let members = PyList::empty(py);
        for m in g.members {
            let md = PyDict::new(py);
            md.set_item("id", m.id)?;
            md.set_item("owned", m.owned)?;
            md.set_item("revoking", m.revoking)?;
            md.set_item("metrics", m.metrics.into_iter().collect::<BTreeMap<_, _>>())?;
            members.append(md)?;
        }
        d.set_item("members", members)?;
        let partitions = PyList::empty(py);
        for p in g.partitions {
            let pd = PyDict::new(py);
            pd.set_item("partition", p.partition)?;
            pd.set_item("stored_offset", p.stored_offset)?;
            pd.set_item("log_end", p.log_end)?;
            pd.set_item("lag", p.lag)?;
            pd.set_item("owner", p.owner)?;
            partitions.append(pd)?;
        }
        d.set_item("partitions", partitions)?;
        Ok(d)
    }
}
