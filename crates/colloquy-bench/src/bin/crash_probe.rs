//! `crash-probe`: a durable session for a test to kill with SIGKILL at any moment and resume
//! in another process (`tests/kills.rs`, docs/durability.md). Its tool `charge` runs again
//! after a crash (`on_interrupted = rerun`) and charges a ledger file that deduplicates by the
//! call's idempotency key, as a payment service does.
//!
//! ```sh
//! crash-probe --store FILE --ledger FILE --turns 3          # prints `session ID`, then `done`
//! crash-probe --store FILE --ledger FILE --resume ID        # prints `resumed`
//! ```

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use colloquy::llm::{RequestKind, ScriptedCall};
use colloquy::prelude::*;
use colloquy::store::{SessionStore, SqliteStore};
use colloquy::tools::OnInterrupted;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    order: u32,
}

/// How long a resumed session may take to finish what was cut off.
const SETTLE: Duration = Duration::from_secs(10);

/// Charges `key` once: a key the ledger holds already is not charged again. A key and its
/// newline go in one write; a kill that still tore one (the key written, not its newline) is
/// mended first, or the next key would be glued to it.
fn charge(ledger: &Path, key: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(ledger)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut line = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        line.push('\n');
    }
    if !text.lines().any(|l| l == key) {
        line.push_str(key);
        line.push('\n');
    }
    if !line.is_empty() {
        file.write_all(line.as_bytes())?;
        file.sync_data()?;
    }
    Ok(())
}

fn agent(ledger: PathBuf) -> Agent {
    let charge =
        FunctionTool::new("charge", "Charge an order.", move |ctx: RunContext, o: Order| {
            let ledger = ledger.clone();
            async move {
                ctx.update("charging").await?;
                tokio::time::sleep(Duration::from_millis(3)).await;
                let key = ctx.idempotency_key();
                tokio::task::spawn_blocking(move || charge(&ledger, &key))
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?
                    .map_err(|e| ToolError::new(e.to_string()))?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<_, ToolError>(format!("charged order {}", o.order))
            }
        })
        .on_interrupted(OnInterrupted::Rerun);
    Agent::new("payer", "Charge orders.").tool(charge)
}

/// `pay N` is a call `pN` of `charge`; anything else a short text.
fn llm() -> ScriptedLlm {
    ScriptedLlm::new([]).with_fallback(|_, request| {
        let last = request.items.items().last().and_then(|i| i.as_message()).cloned();
        match (request.kind, last) {
            (RequestKind::UserTurn, Some(m)) if m.text.starts_with("pay ") => {
                let order = m.text.trim_start_matches("pay ").to_string();
                let call = ScriptedCall::new(
                    format!("p{order}"),
                    "charge",
                    format!(r#"{{"order":{order}}}"#),
                );
                ScriptedResponse::calls([call])
            }
            _ => ScriptedResponse::text("ok"),
        }
    })
}

/// A durable session that `tests/kills.rs` kills at random moments and resumes.
#[derive(clap::Parser)]
#[command(name = "crash-probe")]
struct Args {
    /// The SQLite store the session journals to.
    #[arg(long, value_name = "FILE")]
    store: PathBuf,
    /// Where the payments are recorded, one line each.
    #[arg(long, value_name = "FILE")]
    ledger: PathBuf,
    /// Turns of a new session.
    #[arg(long, value_name = "N", default_value_t = 3)]
    turns: u32,
    /// Resume this stored session instead of starting one.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
}

async fn run(args: Args) -> Result<(), String> {
    let store: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open(&args.store).map_err(|e| e.to_string())?);
    let builder = Session::builder().llm(llm()).store(store).user_away_timeout(None);
    let ledger = args.ledger.clone();
    let quiet = |session: SessionHandle| async move {
        let settled = tokio::time::timeout(SETTLE, async {
            session.wait_for_quiet().await?;
            session.wait_for_idle().await
        });
        settled
            .await
            .map_err(|_| "the session did not settle".to_string())?
            .map_err(|e| e.to_string())?;
        session.suspend().await.map_err(|e| e.to_string())
    };
    match &args.resume {
        Some(id) => {
            let agents = |name: &str| (name == "payer").then(|| agent(ledger.clone()));
            let session = builder.resume(id, agents).await.map_err(|e| e.to_string())?;
            quiet(session).await?;
            println!("resumed");
        }
        None => {
            let session = builder.start(agent(ledger)).await.map_err(|e| e.to_string())?;
            println!("session {}", session.id());
            std::io::stdout().flush().map_err(|e| e.to_string())?;
            for turn in 1..=args.turns {
                session.user_turn(format!("pay {turn}")).await.map_err(|e| e.to_string())?;
                let settled = tokio::time::timeout(SETTLE, session.wait_for_quiet()).await;
                settled
                    .map_err(|_| "a turn did not settle".to_string())?
                    .map_err(|e| e.to_string())?;
            }
            quiet(session).await?;
            println!("done");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let (args, runtime) = match bench_support::start::<Args>() {
        Ok(started) => started,
        Err(status) => return status,
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
