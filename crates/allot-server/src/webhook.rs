//! The budget-alert webhook (docs/budgets.md, "Webhook"): each budget
//! threshold event the store records as new is POSTed as JSON to
//! `[alerts] webhook_url`, by a background task, so the scheduler never
//! waits for the receiver.
//!
//! * The scheduler hands events over a bounded queue ([`QUEUE`]); when it
//!   is full the event is not queued and a warning says so (the event
//!   stays in the store and at `GET /v1/budget-events`).
//! * A delivery is tried [`TRIES`] times: an answer other than 2xx, a
//!   connection failure or a timeout (`webhook_timeout`) is retried after
//!   1 s, 2 s, 4 s, 8 s; each failure is logged, and giving up is logged
//!   as an error.
//! * Deliveries are not stored: those queued or being retried when the
//!   server stops are not sent again after a restart (a restarted server
//!   records nothing new for events it recorded before, so posts nothing
//!   for them).

use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::store::budget::BudgetEventRow;

/// Events waiting for delivery at most.
pub const QUEUE: usize = 1024;

/// Attempts per event (the first and four retries).
pub const TRIES: u32 = 5;

/// The wait before the first retry; doubled before each next one.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The JSON posted: the event's fields and the fleet's name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Payload {
    /// The cluster (fleet) name of the config.
    pub cluster: String,
    #[serde(flatten)]
    pub event: BudgetEventRow,
}

/// Where and how deliveries go.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: reqwest::Url,
    /// One attempt's limit.
    pub timeout: Duration,
    pub tries: u32,
    pub first_backoff: Duration,
}

impl Target {
    /// From `[alerts]`: `None` without a webhook URL; an error names the
    /// key when the URL does not parse.
    pub fn from_config(a: &allot_trace::config::AlertsConfig) -> Result<Option<Target>, String> {
        let Some(url) = &a.webhook_url else { return Ok(None) };
        let url = reqwest::Url::parse(url).map_err(|e| format!("alerts.webhook_url {url:?}: {e}"))?;
        Ok(Some(Target {
            url,
            timeout: Duration::from_secs(a.webhook_timeout_s),
            tries: TRIES,
            first_backoff: FIRST_BACKOFF,
        }))
    }
}

/// The scheduler's end of the queue.
#[derive(Clone, Debug)]
pub struct Webhook {
    tx: mpsc::Sender<Payload>,
    cluster: String,
}

impl Webhook {
    /// Starts the delivery task (on the current Tokio runtime).
    pub fn start(target: Target, cluster: String) -> Webhook {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver_all(target, rx));
        Webhook { tx, cluster }
    }

    /// Queues `event` for delivery without waiting.
    pub fn send(&self, event: &BudgetEventRow) {
        let p = Payload { cluster: self.cluster.clone(), event: event.clone() };
        if let Err(e) = self.tx.try_send(p) {
            let why = match e {
                mpsc::error::TrySendError::Full(_) => "the delivery queue is full",
                mpsc::error::TrySendError::Closed(_) => "the delivery task has stopped",
            };
            tracing::warn!(account = %event.account, threshold = event.threshold, "budget event not posted: {why}");
        }
    }
}

/// Delivers queued events one after the other until the queue closes.
async fn deliver_all(target: Target, mut rx: mpsc::Receiver<Payload>) {
    let http = match reqwest::Client::builder().timeout(target.timeout).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "the budget webhook client cannot be built; no budget event is posted");
            return;
        }
    };
    while let Some(p) = rx.recv().await {
        deliver(&http, &target, &p).await;
    }
}

/// Posts one event, retrying with backoff; `true` once delivered.
async fn deliver(http: &reqwest::Client, target: &Target, p: &Payload) -> bool {
    let mut backoff = target.first_backoff;
    for attempt in 1..=target.tries {
        let failure = match http.post(target.url.clone()).json(p).send().await {
            Ok(r) if r.status().is_success() => return true,
            Ok(r) => format!("answered {}", r.status()),
            Err(e) => e.to_string(),
        };
        let (account, threshold) = (&p.event.account, p.event.threshold);
        if attempt == target.tries {
            tracing::error!(%account, threshold, attempt, error = %failure, "budget event not delivered to the webhook; giving up");
        } else {
            tracing::warn!(%account, threshold, attempt, error = %failure, retry_in = ?backoff, "budget event delivery failed");
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }
    false
}

#[cfg(test)]
#[path = "webhook_tests.rs"]
mod tests;
