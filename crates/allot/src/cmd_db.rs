//! `allot db init`: creates a store (schema and identity) and records it
//! in the data directory. `allot serve` never replaces a deleted, emptied
//! or swapped database by itself (see docs/server.md, "Store identity").

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Subcommand)]
pub enum DbCommand {
    /// Create the store if it does not exist (an existing one is kept as it is) and make the data directory
    /// belong to it; this is how a new, empty store replaces a lost one.
    Init(DbInitArgs),
    /// Replay the store's journal (every step its engine took, the restarts included) through the engine, and
    /// check that the replay made exactly what the store holds: every attempt (nodes, GPU indices, start,
    /// signal, end, outcome, kept progress) and every workload's state. With --policy, the same inputs under
    /// other rules (the live run's exits and reports as they came).
    Replay(DbReplayArgs),
}

#[derive(clap::Args)]
pub struct DbReplayArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// Replay under this policy instead of the one the server ran (then
    /// nothing is checked against the store).
    #[arg(long)]
    policy: Option<String>,
    /// Write the replay's decision log, one JSON line per event (as
    /// `allot sim --log`).
    #[arg(long)]
    log: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DbInitArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// The data directory, as given to `allot serve --data-dir`.
    #[arg(long, default_value = "allot-data")]
    data_dir: PathBuf,
}

pub fn run(c: DbCommand) -> Result<()> {
    match c {
        DbCommand::Init(a) => init(a),
        DbCommand::Replay(a) => replay(a),
    }
}

fn replay(a: DbReplayArgs) -> Result<()> {
    let policy = match &a.policy {
        Some(p) => Some(allot_core::PolicyKind::parse(p).with_context(|| {
            let known: Vec<&str> = allot_core::PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown policy {p:?} (known: {})", known.join(", "))
        })?),
        None => None,
    };
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    rt.block_on(async {
        let store = allot_server::store::Store::open_existing(&a.db)
            .await
            .with_context(|| format!("failed to open the store {}", a.db))?;
        let t0 = std::time::Instant::now();
        let replayed = allot_server::journal::replay(&store, policy)
            .await
            .with_context(|| format!("failed to replay the journal of {}", a.db))?;
        if replayed.steps == 0 {
            eprintln!("the store {} has no journal (never served, or written before schema version 20)", a.db);
        }
        eprintln!(
            "replayed {} steps of {} engine start(s) in {:.2} s: {} attempts, {} workloads",
            replayed.steps,
            replayed.starts,
            t0.elapsed().as_secs_f64(),
            replayed.attempts.len(),
            replayed.phases.len()
        );
        if let Some(path) = &a.log {
            let mut out = std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
            );
            for e in &replayed.log {
                serde_json::to_writer(&mut out, e)?;
                std::io::Write::write_all(&mut out, b"\n")?;
            }
            std::io::Write::flush(&mut out)?;
        }
        if policy.is_some() {
            return Ok(());
        }
        let diffs = allot_server::journal::differences(&store, &replayed).await?;
        if diffs.is_empty() {
            println!(
                "the replay equals the store: {} attempts (nodes, GPU indices, start, signal, end, outcome, kept progress) and {} workloads' states",
                replayed.attempts.len(),
                replayed.phases.len()
            );
            return Ok(());
        }
        for d in diffs.iter().take(20) {
            println!("{d}");
        }
        Err(allot_server::journal::JournalError::Differs { count: diffs.len() }.into())
    })
}

fn init(a: DbInitArgs) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let (id, before) = rt
        .block_on(allot_server::store::instance::init(&a.db, &a.data_dir))
        .with_context(|| format!("failed to initialise the store {}", a.db))?;
    match before {
        Some(old) => eprintln!(
            "store {} is {id}; the data directory {} belonged to store {old} and now belongs to this one",
            a.db,
            a.data_dir.display()
        ),
        None => eprintln!("store {} is {id}; the data directory {} belongs to it", a.db, a.data_dir.display()),
    }
    println!("{id}");
    Ok(())
}
