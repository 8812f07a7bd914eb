//! The HTTP listener: an accept loop over hyper's HTTP/1.1 connections with
//! the limits a server facing untrusted clients needs (docs/server.md,
//! "Limits"):
//!
//! * at most `max_connections` open connections, derived from (and checked
//!   against) `RLIMIT_NOFILE` so that the store, the executor's log files and
//!   its child processes always have descriptors left;
//! * when every slot is taken and a new client arrives, the connection idle
//!   the longest (no request in progress) is closed to make room, as nginx
//!   reuses keep-alive connections; with none idle, the new client waits in
//!   the kernel's backlog until a request ends;
//! * a header timeout: from the moment the server waits for a request (a
//!   new connection, or a keep-alive connection after an answer) until the
//!   request head is read. It is therefore also the keep-alive idle timeout;
//! * request heads are buffered up to [`MAX_HEAD_BUFFER`] bytes; the API's
//!   own, lower limits answer in JSON (`api::limits`).
//!
//! On shutdown the loop stops accepting, asks every connection to close after its current request and waits for them, at
//! most `SHUTDOWN_GRACE` (10 s).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};

/// Bytes hyper buffers for a request head; past it hyper answers a bare
/// 431 and closes. The API's JSON limits are below it.
pub const MAX_HEAD_BUFFER: usize = 64 * 1024;
/// Header lines hyper parses; past it hyper answers a bare 431.
pub const MAX_HEAD_LINES: usize = 128;
/// Descriptors kept for everything but client connections, at least.
pub const MIN_RESERVE: u64 = 256;
/// How long a connection asked to close may take when no request runs.
const EVICT_GRACE: Duration = Duration::from_secs(1);
/// How long shutdown waits for connections to finish their requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Limits of the HTTP edge (`allot serve` flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeOptions {
    /// Open client connections; `None`: derived from `RLIMIT_NOFILE`.
    pub max_connections: Option<usize>,
    /// Wait for a request head, and keep-alive idle time.
    pub header_timeout: Duration,
    /// Reading a request body.
    pub body_timeout: Duration,
    /// A request from its head to its answer (body reading included).
    pub request_timeout: Duration,
    /// Requests handled at once; more are answered 503 at once.
    pub max_in_flight: usize,
}

impl Default for EdgeOptions {
    fn default() -> EdgeOptions {
        EdgeOptions {
            max_connections: None,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            max_in_flight: 256,
        }
    }
}

/// Why the listener's limits cannot be kept.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    #[error("failed to read RLIMIT_NOFILE: {0}")]
    Rlimit(std::io::Error),
    #[error(
        "--max-connections {asked} needs {needed} file descriptors ({asked} + {reserve} kept for the store, logs \
         and workloads) but RLIMIT_NOFILE is {soft}: raise the limit (systemd: LimitNOFILE=) or lower --max-connections"
    )]
    TooManyConnections { asked: usize, needed: u64, reserve: u64, soft: u64 },
    #[error(
        "RLIMIT_NOFILE is {soft}, too low to serve: at least {needed} file descriptors are needed ({reserve} for the \
         store, logs and workloads, and 16 client connections); raise it (systemd: LimitNOFILE=)"
    )]
    TooFewDescriptors { soft: u64, needed: u64, reserve: u64 },
    #[error("--{flag} must be more than 0")]
    Zero { flag: &'static str },
}

/// Descriptors kept for the store, logs and workloads out of `soft`: an
/// eighth, at least [`MIN_RESERVE`].
pub fn reserve(soft: u64) -> u64 {
    (soft / 8).max(MIN_RESERVE)
}

/// The connection limit for a descriptor limit `soft`: the one asked for,
/// checked, or everything above the reserve (at most 16,384).
pub fn connection_limit(asked: Option<usize>, soft: u64) -> Result<usize, EdgeError> {
    let reserve = reserve(soft);
    match asked {
        Some(0) => Err(EdgeError::Zero { flag: "max-connections" }),
        Some(n) if n as u64 + reserve > soft => {
            Err(EdgeError::TooManyConnections { asked: n, needed: n as u64 + reserve, reserve, soft })
        }
        Some(n) => Ok(n),
        None if soft < reserve + 16 => Err(EdgeError::TooFewDescriptors { soft, needed: reserve + 16, reserve }),
        None => Ok((soft - reserve).min(16_384) as usize),
    }
}

/// This process's soft `RLIMIT_NOFILE`.
pub fn descriptor_limit() -> Result<u64, EdgeError> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    if rc != 0 {
        return Err(EdgeError::Rlimit(std::io::Error::last_os_error()));
    }
    Ok(r.rlim_cur)
}

/// Checks the options against the descriptor limit; returns the
/// connection limit.
pub fn check(opts: &EdgeOptions) -> Result<usize, EdgeError> {
    for (flag, d) in [
        ("header-timeout", opts.header_timeout),
        ("body-timeout", opts.body_timeout),
        ("request-timeout", opts.request_timeout),
    ] {
        if d.is_zero() {
            return Err(EdgeError::Zero { flag });
        }
    }
    if opts.max_in_flight == 0 {
        return Err(EdgeError::Zero { flag: "max-in-flight" });
    }
    let soft = descriptor_limit()?;
    let limit = connection_limit(opts.max_connections, soft)?;
    tracing::info!(max_connections = limit, rlimit_nofile = soft, reserve = reserve(soft), "connection limit");
    Ok(limit)
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests in progress (between their head and their answer).
    busy: AtomicUsize,
    /// Milliseconds since the registry's epoch when it last became idle.
    idle_since: AtomicU64,
    evicted: AtomicBool,
    evict: tokio::sync::Notify,
}

/// The open connections.
struct Registry {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn open(&self) -> (u64, Arc<Conn>) {
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            evicted: AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.conns.lock().expect("registry lock").insert(id, conn.clone());
        (id, conn)
    }

    fn close(&self, id: u64) {
        self.conns.lock().expect("registry lock").remove(&id);
    }

    /// Asks the connection idle the longest to close; false when none is idle.
    fn evict_oldest_idle(&self) -> bool {
        let conns = self.conns.lock().expect("registry lock");
        let oldest = conns
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.evicted.load(Ordering::Acquire))
            .min_by_key(|c| c.idle_since.load(Ordering::Acquire));
        match oldest {
            Some(c) => {
                c.evicted.store(true, Ordering::Release);
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Marks a connection busy while a request is handled.
struct Busy {
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Busy {
    fn enter(conn: &Arc<Conn>, registry: &Arc<Registry>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy { conn: conn.clone(), registry: registry.clone() }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conn.idle_since.store(self.registry.now_ms(), Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `router` on `listener` until `stop` fires, within the limits.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    opts: EdgeOptions,
    max_connections: usize,
    mut stop: oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_connections));
    let registry = Arc::new(Registry { epoch: Instant::now(), next: AtomicU64::new(0), conns: Mutex::default() });
    let (closing_tx, closing) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .max_buf_size(MAX_HEAD_BUFFER)
        .max_headers(MAX_HEAD_LINES);
    let http = Arc::new(http);
    let mut full_logged = false;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors despite the reserve, or a connection
                    // reset before it was accepted: retry shortly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => {
                full_logged = false;
                p
            }
            Err(_) => {
                let evicted = registry.evict_oldest_idle();
                if !full_logged {
                    tracing::warn!(max_connections, evicted, "connection limit reached");
                    full_logged = true;
                }
                tokio::select! {
                    p = slots.clone().acquire_owned() => p.expect("the slots are never closed"),
                    _ = &mut stop => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, conn) = registry.open();
        let (registry, http, router, closing) = (registry.clone(), http.clone(), router.clone(), closing.clone());
        tokio::spawn(async move {
            connection(TokioIo::new(stream), peer, &conn, &registry, &http, router, closing).await;
            tracing::trace!(%peer, "connection closed");
            registry.close(id);
            drop(permit);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(all)).await.is_err() {
        tracing::warn!("connections still open after the shutdown grace; dropping them");
    }
    Ok(())
}

/// Serves one connection until it ends, is evicted or the server stops.
/// Each request carries the peer's address (axum's `ConnectInfo`).
async fn connection(
    io: TokioIo<tokio::net::TcpStream>,
    peer: std::net::SocketAddr,
    conn: &Arc<Conn>,
    registry: &Arc<Registry>,
    http: &hyper::server::conn::http1::Builder,
    router: Router,
    mut closing: watch::Receiver<bool>,
) {
    let inner = TowerToHyperService::new(router);
    let (c2, r2) = (conn.clone(), registry.clone());
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        // Where the request came from (sign-ins are audited and limited by it).
        req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        let busy = Busy::enter(&c2, &r2);
        let fut = inner.call(req);
        async move {
            let r = fut.await;
            drop(busy);
            r
        }
    });
    let served = http.serve_connection(io, svc);
    tokio::pin!(served);
    tokio::select! {
        r = served.as_mut() => return report(r),
        _ = conn.evict.notified() => tracing::debug!("closing the longest idle connection to make room"),
        _ = closing.wait_for(|c| *c) => {}
    }
    // Between requests it closes at once; a request in progress is answered
    // first. One that stays open with no request running is dropped.
    served.as_mut().graceful_shutdown();
    loop {
        match tokio::time::timeout(EVICT_GRACE, served.as_mut()).await {
            Ok(r) => return report(r),
            Err(_) if conn.busy.load(Ordering::Acquire) == 0 => return,
            Err(_) => {}
        }
    }
}

fn report(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        // Header timeouts, resets and malformed requests: the client's doing.
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limits() {
        // (case, --max-connections, RLIMIT_NOFILE, limit or error)
        type Case = (&'static str, Option<usize>, u64, Result<usize, &'static str>);
        let cases: [Case; 6] = [
            ("systemd default", None, 1024, Ok(768)),
            ("large limit capped", None, 1 << 20, Ok(16_384)),
            ("an eighth kept", None, 65_536, Ok(16_384)),
            ("asked within", Some(700), 1024, Ok(700)),
            ("asked beyond", Some(900), 1024, Err("needs 1156 file descriptors")),
            ("too few", None, 200, Err("too low to serve")),
        ];
        for (name, asked, soft, want) in cases {
            let got = connection_limit(asked, soft).map_err(|e| e.to_string());
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "case {name}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "case {name}: {g}"),
                (g, w) => panic!("case {name}: got {g:?}, want {w:?}"),
            }
        }
        assert_eq!(reserve(4096), 512);
    }
}
