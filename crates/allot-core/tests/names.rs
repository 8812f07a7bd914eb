//! The names enums are written as (in traces, the store, logs and the API)
//! are a format: each variant's name, and that it reads back.

use allot_core::engine::{Change, Outcome};
use allot_core::{Class, NodeEventKind, Phase, PolicyKind, Priority};

#[test]
fn names_are_the_documented_ones_and_read_back() {
    let classes = [(Class::Batch, "batch"), (Class::Interactive, "interactive"), (Class::Service, "service")];
    for (c, name) in classes {
        assert_eq!((c.as_str(), Class::parse(name)), (name, Some(c)));
    }
    let priorities =
        [(Priority::Low, "low"), (Priority::Normal, "normal"), (Priority::High, "high"), (Priority::Urgent, "urgent")];
    for (p, name) in priorities {
        assert_eq!((p.as_str(), Priority::parse(name)), (name, Some(p)));
    }
    let kinds = [
        (NodeEventKind::Fail, "fail"),
        (NodeEventKind::Repair, "repair"),
        (NodeEventKind::Drain, "drain"),
        (NodeEventKind::Undrain, "undrain"),
        (NodeEventKind::Outage, "outage"),
        (NodeEventKind::Return, "return"),
    ];
    for (k, name) in kinds {
        assert_eq!((k.as_str(), NodeEventKind::parse(name)), (name, Some(k)));
    }
    let policies = [
        (PolicyKind::Fifo, "fifo"),
        (PolicyKind::FifoBackfill, "fifo-backfill"),
        (PolicyKind::Priority, "priority"),
        (PolicyKind::Allot, "allot"),
    ];
    for (p, name) in policies {
        assert_eq!((p.as_str(), PolicyKind::parse(name)), (name, Some(p)));
    }
    let phases = [
        (Phase::Pending, "pending"),
        (Phase::Running, "running"),
        (Phase::Stopping, "stopping"),
        (Phase::Finished, "finished"),
        (Phase::Rejected, "rejected"),
        (Phase::Failed, "failed"),
        (Phase::Cancelled, "cancelled"),
    ];
    for (p, name) in phases {
        assert_eq!(p.as_str(), name);
    }
    let outcomes = [
        (Outcome::Finished, "finished"),
        (Outcome::Preempted, "preempted"),
        (Outcome::NodeFailed, "node-failed"),
        (Outcome::Cancelled, "cancelled"),
        (Outcome::Failed, "failed"),
        (Outcome::LaunchFailed, "launch-failed"),
    ];
    for (o, name) in outcomes {
        assert_eq!(o.as_str(), name);
    }
    let changes = [
        (Change::Start, "start"),
        (Change::Preempt, "preempt"),
        (Change::Abort, "abort"),
        (Change::Stop, "stop"),
        (Change::Fail, "fail"),
        (Change::Finish, "finish"),
        (Change::Reject, "reject"),
        (Change::Cancel, "cancel"),
        (Change::Retry, "retry"),
        (Change::Failed, "failed"),
        (Change::LaunchFailed, "launch-failed"),
    ];
    for (c, name) in changes {
        assert_eq!(c.as_str(), name);
    }
    assert_eq!(Class::parse("Batch"), None, "names are case-sensitive");
}
