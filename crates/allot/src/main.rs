//! The `allot` command line.

mod args;
mod cmd_admin;
mod cmd_client;
mod cmd_compare;
mod cmd_db;
mod cmd_help;
mod cmd_kube;
mod cmd_login;
mod cmd_serve;
mod cmd_sim;
mod cmd_trace;
mod exit;
mod workdir;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "allot",
    version,
    about = "GPU-time budgets, hierarchical fair share and a time-slicing contract for shared GPU clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace under one policy and measure what happened.
    Sim(cmd_sim::SimArgs),
    /// Import public traces or generate synthetic ones.
    #[command(subcommand)]
    Trace(cmd_trace::TraceCommand),
    /// Replay a trace (or generated traces over several seeds) under several policies, in parallel,
    /// and write summary.json, summary.md and a self-contained report.html.
    Compare(cmd_compare::CompareArgs),
    /// Run the live scheduler: HTTP API, store and executor.
    Serve(cmd_serve::ServeArgs),
    /// The store: create it explicitly (`allot serve` refuses to replace a missing or emptied one), replay its
    /// journal, back it up and restore it.
    #[command(subcommand)]
    Db(cmd_db::DbCommand),
    /// Sign in as yourself: a munge credential proves your Unix user to the server, which opens a session
    /// (kept readable by you only and used by later commands to that server).
    Login(cmd_login::LoginArgs),
    /// End the session `allot login` opened with this server, and forget it.
    Logout(cmd_login::LogoutArgs),
    /// People's sessions: allot session list | end ID
    #[command(subcommand)]
    Session(cmd_login::SessionCommand),
    /// API tokens: list, create (through the server, or with --db straight into the store), revoke.
    #[command(subcommand)]
    Token(cmd_admin::TokenCommand),
    /// The audit log, newest first: account, budget, share and token changes, who, when, before and after
    /// (admins).
    Audit(cmd_admin::AuditArgs),
    #[command(flatten)]
    Client(cmd_client::ClientCommand),
    /// Node maintenance: allot node drain|undrain|fail|repair NAME
    #[command(subcommand)]
    Node(cmd_admin::NodeCommand),
    /// The server itself (admins): allot admin reload
    #[command(subcommand)]
    Admin(cmd_admin::AdminCommand),
    /// A Kubernetes cluster of the fleet: `allot kubernetes manifests` prints what its admin applies.
    #[command(subcommand)]
    Kubernetes(cmd_kube::KubeCommand),
    /// Shell completions (bash, zsh, fish) on standard output.
    Completions(cmd_help::CompletionsArgs),
    /// The man page (roff) on standard output, or a page per command into --dir.
    Man(cmd_help::ManArgs),
}

/// Runs a client command's future on a runtime of its own.
fn block_on(f: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    use anyhow::Context;
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    rt.block_on(f)
}

/// Exits on a command line clap refused, saying what to do where the
/// mistake is a common one: a program given to `allot submit` without `--`.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let submitting = std::env::args().nth(1).as_deref() == Some("submit");
    if submitting
        && e.kind() == ErrorKind::UnknownArgument
        && let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg)
        && !arg.starts_with('-')
    {
        eprint!("{}", e.render());
        eprintln!(
            "\ntip: put the program and its arguments after --, as in: allot submit --account PATH --gpus N -- {arg} …"
        );
        std::process::exit(exit::Code::Usage as i32);
    }
    e.exit()
}

/// An error and its causes, `: `-separated, each said once: a cause that
/// a message already quotes (`cannot listen on …: {source}`) is not said
/// again.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn main() -> std::process::ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    if !matches!(cli.command, Command::Serve(_)) {
        // A reader that stops early (`allot … | head`) ends the command as
        // it ends `cat`: SIGPIPE's default, not a panic on the next write.
        // Not for `allot serve`: a child or a client closing a pipe must
        // never end the server.
        // SAFETY: signal has no memory-safety preconditions; nothing runs
        // concurrently yet.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Sim(a) => cmd_sim::run(a),
        Command::Trace(c) => cmd_trace::run(c),
        Command::Compare(a) => cmd_compare::run(a),
        Command::Serve(a) => cmd_serve::run(a),
        Command::Db(c) => cmd_db::run(c),
        Command::Login(a) => block_on(cmd_login::login(a)),
        Command::Logout(a) => block_on(cmd_login::logout(a)),
        Command::Session(c) => block_on(cmd_login::session(c)),
        Command::Token(c) => cmd_admin::run_token(c),
        Command::Audit(a) => cmd_admin::run_audit(a),
        Command::Client(c) => cmd_client::run(c),
        Command::Node(c) => cmd_admin::run_node(c),
        Command::Admin(c) => cmd_admin::run_admin(c),
        Command::Kubernetes(c) => cmd_kube::run(c),
        Command::Completions(a) => cmd_help::completions(a, Cli::command()),
        Command::Man(a) => cmd_help::man(a, Cli::command()),
    };
    let code = match result {
        Ok(()) => exit::Code::Ok,
        Err(e) => {
            // An error may quote what a server or a user wrote: escaped.
            eprintln!("error: {}", allot_server::client::terminal::line(&message(&e)));
            exit::Code::of(&e)
        }
    };
    std::process::ExitCode::from(code as u8)
}
