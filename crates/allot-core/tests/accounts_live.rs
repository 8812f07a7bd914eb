//! The live account tree in the engine (ACC-1, ACC-2): edits of an
//! `AccountBook` swapped in while work runs keep every workload's account
//! and usage; a closed account takes no new work while its accepted work
//! runs on; a created account's work is charged to it.

use allot_core::{AccountBook, AccountEdit, AccountField, AccountSpec, Engine, Exit, Phase, Policy, PolicyKind, Rule};
use allot_testkit::{Drive, StateBuilder, Wl};

fn setup() -> (Engine, Box<dyn Policy>, AccountBook) {
    let state = StateBuilder::new().pool("p", "H100", 2, 8).account("org/a").account("org/b").build();
    let book = AccountBook::seed(&state.accounts);
    (Engine::new(state), PolicyKind::Allot.build(), book)
}

fn edit(engine: &mut Engine, book: &mut AccountBook, e: AccountEdit) {
    *book = book.apply(&e).unwrap_or_else(|err| panic!("{e:?}: {err}"));
    engine.set_accounts(book.tree().clone());
}

#[test]
fn a_closed_account_takes_no_new_work_and_its_running_work_runs_on() {
    let (mut engine, mut policy, mut book) = setup();
    let running = Wl::new("r").account("org/a").gpus(8).work(1000).build(engine.state());
    let r = engine.arrive(&mut *policy, running, 0, 0);
    let queued = Wl::new("q").account("org/a").gpus(16).work(100).submit(1).build(engine.state());
    let q = engine.arrive(&mut *policy, queued, 0, 1);
    engine.pass(policy.as_mut(), 1);
    assert_eq!(engine.state().run(r).phase, Phase::Running);

    edit(&mut engine, &mut book, AccountEdit::Close { path: "org/a".into() });
    let late = Wl::new("late").account("org/a").gpus(1).work(10).submit(5).build(engine.state());
    let l = engine.arrive(&mut *policy, late, 0, 5);
    let other = Wl::new("other").account("org/b").gpus(8).work(10).submit(5).build(engine.state());
    let o = engine.arrive(&mut *policy, other, 0, 5);
    let reason = engine.state().run(l).last_reason.clone().expect("a reason");
    assert_eq!((engine.state().run(l).phase, reason.rule), (Phase::Rejected, Rule::AccountClosed));
    assert_eq!(reason.to_string(), "ACC-2: account org/a is closed");
    engine.pass(policy.as_mut(), 5);
    assert_eq!(engine.state().run(o).phase, Phase::Running, "other accounts are not affected");
    assert_eq!(engine.state().run(r).phase, Phase::Running, "accepted work runs on");
    engine.exited(r, 1, Exit::Completed, 1000);
    engine.exited(o, 1, Exit::Completed, 1000);
    engine.pass(policy.as_mut(), 1000);
    assert_eq!(engine.state().run(q).phase, Phase::Running, "accepted pending work still starts (ACC-2)");
    engine.state().sanity_check(1000).expect("invariants hold");
}

#[test]
fn created_and_renamed_accounts_keep_usage_where_it_belongs() {
    let (mut engine, mut policy, mut book) = setup();
    let a = engine.state().accounts.get("org/a").unwrap();
    let w = Wl::new("w").account("org/a").gpus(8).work(3600).build(engine.state());
    let w = engine.arrive(&mut *policy, w, 0, 0);
    engine.pass(policy.as_mut(), 0);
    let spec = AccountSpec { path: "org/new".into(), budget_gpu_hours: Some(4.0), ..Default::default() };
    edit(&mut engine, &mut book, AccountEdit::Create(spec));
    edit(&mut engine, &mut book, AccountEdit::Rename { path: "org/a".into(), to: "org/renamed".into() });
    edit(
        &mut engine,
        &mut book,
        AccountEdit::Set { path: "org/b".into(), field: AccountField::Share, value: Some(3.0) },
    );
    let n = Wl::new("n").account("org/new").gpus(8).work(3600).submit(10).build(engine.state());
    let n = engine.arrive(&mut *policy, n, 0, 10);
    engine.pass(policy.as_mut(), 10);
    assert_eq!(engine.state().run(n).phase, Phase::Running, "a new account's work runs");
    let tree = &engine.state().accounts;
    assert_eq!(tree.get("org/renamed"), Some(a), "the same id");
    assert_eq!(tree.account(engine.state().spec(w).account).path, "org/renamed", "the workload follows the rename");
    let at = |p: &str, t| engine.state().ledger.at(tree.get(p).unwrap(), t).charged_gpu_s;
    assert_eq!((at("org/renamed", 3600), at("org/new", 3610)), (8 * 3600, 8 * 3600), "usage stays with its account");
    engine.state().sanity_check(3600).expect("invariants hold");
}
