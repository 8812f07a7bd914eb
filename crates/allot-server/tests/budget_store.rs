//! Budget threshold events in the store, against SQLite and PostgreSQL:
//! each is recorded once per account, period and threshold, also when a
//! restarted server (a new store connection) notices it again.

mod support;

use allot_server::store::Store;
use allot_server::store::budget::BudgetEventRow;
use support::{Backend, TestDb, temp_dir};

both_stores!(budget_events_once_sqlite, budget_events_once_postgres, once);

fn event(account: &str, period: i64, threshold: f64) -> BudgetEventRow {
    BudgetEventRow {
        t: period + 100,
        account: account.into(),
        period_start_t: period,
        threshold,
        used_gpu_hours: 8.0 * threshold / 0.8,
        budget_gpu_hours: 10.0,
    }
}

async fn once(backend: Backend) {
    let dir = temp_dir("budget-events");
    let db = TestDb::new(backend, &dir).await;
    let store = Store::open(&db.url).await.expect("open");
    let first = [event("org/a", 0, 0.8), event("org/a", 0, 1.0), event("org/b", 0, 0.8)];
    assert_eq!(store.record_budget_events(&first).await.unwrap(), first);
    store.close().await;
    // After a restart the same events are noticed again: nothing is new.
    let store = Store::open(&db.url).await.expect("reopen");
    let again = [event("org/a", 0, 0.8), event("org/a", 7200, 0.8)];
    assert_eq!(
        store.record_budget_events(&again).await.unwrap(),
        [event("org/a", 7200, 0.8)],
        "only the next period's"
    );
    let all = store.budget_events().await.unwrap();
    assert_eq!(all.len(), 4, "{all:?}");
    assert_eq!(all[3], event("org/a", 7200, 0.8));
    store.close().await;
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
