//! The usage pipeline of one process, as `usage_check.transport` and the process's role
//! ask (SPEC §1, §8).
//!
//! | transport | `serve` | `worker` |
//! |---|---|---|
//! | `memory` | queue → listener (accounted in this process) | refused |
//! | `jetstream` | queue → publisher → stream; and the consumer unless `usage_check.consume = false` | consumer only |
//!
//! The proxy always publishes into the same bounded in-process queue without waiting;
//! only what drains that queue differs.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::event::{UsagePublisher, queue};
use super::jetstream::{consumer, publisher};
use super::ledger::Accountant;
use super::listener::{self, ListenerSettings};
use crate::config::{Config, UsageTransport};

/// Which half of the gateway a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `tollgate serve`: produces events, and accounts them unless told not to.
    Serve,
    /// `tollgate worker`: accounts what the stream holds, produces nothing.
    Worker,
}

/// How long a start waits for NATS to create the stream and consumer before going on
/// without (the tasks create them once NATS answers).
const STARTUP_NATS_WAIT: Duration = Duration::from_secs(3);

/// The running pipeline: the publisher handle the proxy uses and the tasks behind it.
pub struct Pipeline {
    publisher: UsagePublisher,
    tasks: Vec<JoinHandle<()>>,
}

impl Pipeline {
    /// Starts the tasks `config` asks of a process in `role`; they run until `stop`
    /// fires, then drain within `usage_check.drain_timeout_ms`.
    pub async fn start(
        config: &Config,
        accountant: Accountant,
        role: Role,
        stop: CancellationToken,
    ) -> anyhow::Result<Self> {
        let usage = &config.usage_check;
        let batching = ListenerSettings::from_config(usage, config.database.max_connections);
        if usage.transport == UsageTransport::Memory {
            anyhow::ensure!(role == Role::Serve, "the memory transport has no worker");
            let (publisher, rx) = queue(usage.queue_capacity);
            let task = tokio::spawn(listener::run(accountant, rx, batching, stop));
            return Ok(Self {
                publisher,
                tasks: vec![task],
            });
        }

        super::jetstream::describe_metrics();
        let name = match role {
            Role::Serve => "tollgate serve",
            Role::Worker => "tollgate worker",
        };
        let client = crate::nats::connect(&config.nats, name, false).await?;
        let js = crate::nats::jetstream(client);
        match tokio::time::timeout(STARTUP_NATS_WAIT, crate::nats::ensure(&js, &config.nats)).await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = format!("{e:#}"),
                "JetStream stream or consumer not ready; usage events wait until they are"
            ),
            Err(_) => tracing::warn!(
                "NATS does not answer yet; usage events wait in the queue until it does"
            ),
        }

        let mut tasks = Vec::new();
        let publisher = if role == Role::Serve {
            let (publisher, rx) = queue(usage.queue_capacity);
            let settings = publisher::PublisherSettings {
                nats: config.nats.clone(),
                drain_timeout: batching.drain_timeout,
            };
            tasks.push(tokio::spawn(publisher::run(
                js.clone(),
                rx,
                settings,
                stop.clone(),
            )));
            publisher
        } else {
            UsagePublisher::disabled()
        };
        if role == Role::Worker || usage.consume {
            let settings = consumer::ConsumerSettings {
                nats: config.nats.clone(),
                batching,
            };
            tasks.push(tokio::spawn(consumer::run(accountant, js, settings, stop)));
        }
        Ok(Self { publisher, tasks })
    }

    /// What the proxy publishes into.
    pub fn publisher(&self) -> UsagePublisher {
        self.publisher.clone()
    }

    /// Waits for every task to end (after the `stop` given to [`start`](Self::start)).
    pub async fn stopped(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
