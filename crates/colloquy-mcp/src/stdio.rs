//! A server run as a child process, spoken to over its stdio with rmcp's line transport, with
//! what rmcp's own child transport lacks at the edges:
//!
//! - a relay between the child's stdout and rmcp that keeps every line under rmcp's length
//!   limit and reports the ones it drops (rmcp would drop them silently and leave the call
//!   waiting), and rewrites a tool list rmcp could not read (`frames.rs`);
//! - a guard process in the server's process group that kills the whole group as soon as
//!   colloquy's end of a pipe closes: when colloquy closes the server, drops it, exits, or is
//!   killed (even with SIGKILL), so no server or grandchild outlives it.

use std::io;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, DuplexStream};
use tokio::process::{ChildStdin, ChildStdout, Command};

use crate::client::{Dropped, Edges};
use crate::frames::{MAX_MESSAGE, Screened, screen, target};

/// How much of a dropped line is kept to learn whom it was for.
const KEPT_PREFIX: usize = 64 * 1024;

/// How long a closed server may take to exit after its stdin closes before its group is
/// killed (the Python SDK's `PROCESS_TERMINATION_TIMEOUT`).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The guard: ignores the signals a terminal or a supervisor sends to colloquy's group, waits
/// for its stdin (colloquy's pipe) to close, then kills its own process group, the server's.
const GUARD_SCRIPT: &str = "trap '' INT HUP TERM QUIT PIPE; read _; kill -s KILL 0";

/// A running server and the transport rmcp speaks through.
pub(crate) struct StdioTransport {
    inner: AsyncRwTransport<RoleClient, DuplexStream, ChildStdin>,
    child: Option<Box<dyn ChildWrapper>>,
    /// Dropped with the transport: its pipe closes and the guard kills the group.
    _guard: Option<Guard>,
}

/// Starts `command` as the leader of a new process group, with its guard and relay.
pub(crate) fn spawn(
    id: &str,
    command: Command,
    edges: Arc<Edges>,
) -> io::Result<(StdioTransport, Option<tokio::process::ChildStderr>)> {
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader());
    wrapped
        .command_mut()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let mut child = wrapped.spawn()?;
    let stdin = child.inner_mut().stdin().take();
    let stdout = child.inner_mut().stdout().take();
    let stderr = child.inner_mut().stderr().take();
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(io::Error::other("the server's stdio could not be piped"));
    };
    let guard = match child.id().map(guard) {
        Some(Ok(guard)) => Some(guard),
        // The server exited at once (its group is gone): the handshake reports it.
        Some(Err(e)) => {
            tracing::warn!(server = %id, "MCP server's group guard did not start: {e}");
            None
        }
        None => None,
    };
    let (from_relay, to_rmcp) = tokio::io::duplex(64 * 1024);
    tokio::spawn(relay(id.to_string(), stdout, from_relay, edges));
    let inner = AsyncRwTransport::new_client(to_rmcp, stdin);
    Ok((StdioTransport { inner, child: Some(child), _guard: guard }, stderr))
}

impl Transport<RoleClient> for StdioTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    /// MCP's stdio shutdown: close the server's stdin, give it [`EXIT_GRACE`] to exit, then
    /// kill its group.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await?;
        // Kept in place while waiting: if this is cancelled, dropping the transport kills it.
        if let Some(child) = self.child.as_mut()
            && tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_err()
        {
            Box::into_pin(child.kill()).await?;
        }
        self.child = None;
        Ok(())
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        // SIGKILL to the group; tokio reaps the leader in the background.
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
        }
    }
}

/// The guard process and colloquy's end of its pipe.
struct Guard {
    _process: tokio::process::Child,
    _pipe: ChildStdin,
}

/// Starts the guard of process group `group`, inside it. A pipe's end closes whatever way
/// its holder ends (unlike `PR_SET_PDEATHSIG`, which follows the spawning thread and reaches
/// one process, not a group), and `O_CLOEXEC` keeps it out of other children.
fn guard(group: u32) -> io::Result<Guard> {
    let group = i32::try_from(group).map_err(io::Error::other)?;
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", GUARD_SCRIPT])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(group);
    let mut process = sh.spawn()?;
    let pipe = process.stdin.take().ok_or_else(|| io::Error::other("no pipe to the guard"))?;
    Ok(Guard { _process: process, _pipe: pipe })
}

/// Copies the server's stdout to rmcp line by line: a line over [`MAX_MESSAGE`] is dropped and
/// reported to the call it answered, a tool list rmcp could not read is rewritten. Ends when
/// the server's stdout does (then rmcp sees the end) or rmcp stops reading.
async fn relay(id: String, stdout: ChildStdout, mut to_rmcp: DuplexStream, edges: Arc<Edges>) {
    let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    // The start of a line being dropped, and its length so far.
    let mut dropping: Option<(Vec<u8>, usize)> = None;
    loop {
        let (taken, ended) = {
            let Ok(available) = reader.fill_buf().await else { return };
            if available.is_empty() {
                return;
            }
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..take];
            match &mut dropping {
                Some((_, length)) => *length += take,
                None if line.len() + take > MAX_MESSAGE => {
                    let length = line.len() + take;
                    let mut start = std::mem::take(&mut line);
                    start.truncate(KEPT_PREFIX);
                    let room = KEPT_PREFIX.saturating_sub(start.len()).min(take);
                    start.extend_from_slice(&chunk[..room]);
                    dropping = Some((start, length));
                }
                None => line.extend_from_slice(chunk),
            }
            (take, newline.is_some())
        };
        reader.consume(taken);
        if !ended {
            continue;
        }
        if let Some((start, length)) = dropping.take() {
            let bytes = Some(length - 1); // the message, without its newline
            edges.dropped(&id, Dropped { target: target(&start), bytes });
            continue;
        }
        let message = line.strip_suffix(b"\n").unwrap_or(&line);
        let message = message.strip_suffix(b"\r").unwrap_or(message);
        let written = match screen(message) {
            Screened::Pass => to_rmcp.write_all(&line).await,
            Screened::Rewritten { message: mut rewritten, skipped } => {
                edges.unreadable(&id, skipped);
                rewritten.push(b'\n');
                to_rmcp.write_all(&rewritten).await
            }
        };
        if written.is_err() {
            return;
        }
        line.clear();
    }
}
