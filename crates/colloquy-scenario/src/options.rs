//! The scenario file's `options`: the session's settings, each time checked against what the
//! runner can honour.

use std::time::Duration;

use colloquy::templates::Templates;

use crate::ScenarioError;
use crate::json::{Obj, invalid, ms};

/// `options`.
#[derive(Debug)]
pub struct Options {
    /// `max_tool_steps`.
    pub max_tool_steps: Option<u32>,
    /// `allow_interruptions`.
    pub allow_interruptions: Option<bool>,
    /// `user_away_timeout_ms` (`null` disables the timer).
    pub user_away_timeout: Option<Duration>,
    /// `playout_ms_per_char`.
    pub playout_ms_per_char: u64,
    /// `end_timeout_ms`.
    pub end_timeout: Duration,
    /// `templates`.
    pub templates: Option<Templates>,
    /// `cancel_grace_ms`.
    pub cancel_grace: Option<Duration>,
    /// `drain_timeout_ms` (absent: the session's default; `null`: no timeout).
    pub drain_timeout: Option<Duration>,
    /// `interrupt_timeout_ms` (absent: the session's default; `null`: no bound).
    pub interrupt_timeout: Option<Duration>,
    /// `max_tool_calls_per_turn`.
    pub max_tool_calls_per_turn: Option<u32>,
    /// `deadline_ms`: the session's default tool deadline.
    pub tool_deadline: Option<Duration>,
    /// `heartbeat_ms`: the session's default tool heartbeat.
    pub tool_heartbeat: Option<Duration>,
}

pub(crate) fn parse_options(mut o: Obj) -> Result<Options, ScenarioError> {
    let max_tool_steps = match o.u64("max_tool_steps")? {
        Some(n) => {
            Some(u32::try_from(n).map_err(|_| invalid(&o.at("max_tool_steps"), "too large"))?)
        }
        None => None,
    };
    let allow_interruptions = o.bool("allow_interruptions")?;
    let user_away_timeout = o.millis_or_null("user_away_timeout_ms", Some(ms(15_000)))?;
    // Per character, so a day is far past any speech and no product of it overflows.
    let playout_ms_per_char = match o.u64("playout_ms_per_char")? {
        Some(n) if n > 86_400_000 => {
            let at = o.at("playout_ms_per_char");
            return Err(invalid(&at, format!("{n} ms per character is more than a day")));
        }
        other => other.unwrap_or(0),
    };
    let end_timeout = o.millis("end_timeout_ms")?.unwrap_or(ms(60_000));
    let templates = parse_templates(&mut o)?;
    let cancel_grace = o.millis("cancel_grace_ms")?;
    let defaults = colloquy::session::SessionOptions::default();
    let drain_timeout = o.millis_or_null("drain_timeout_ms", defaults.drain_timeout)?;
    let interrupt_timeout = o.millis_or_null("interrupt_timeout_ms", defaults.interrupt_timeout)?;
    let max_tool_calls_per_turn = match o.u64("max_tool_calls_per_turn")? {
        Some(n) => Some(
            u32::try_from(n).map_err(|_| invalid(&o.at("max_tool_calls_per_turn"), "too large"))?,
        ),
        None => None,
    };
    let tool_deadline = o.positive_millis("deadline_ms")?;
    let tool_heartbeat = o.positive_millis("heartbeat_ms")?;
    o.finish()?;
    Ok(Options {
        max_tool_steps,
        allow_interruptions,
        user_away_timeout,
        playout_ms_per_char,
        end_timeout,
        templates,
        cancel_grace,
        drain_timeout,
        interrupt_timeout,
        max_tool_calls_per_turn,
        tool_deadline,
        tool_heartbeat,
    })
}

/// `templates`: the template texts of §8 and of tool control (decision 69), any of them.
pub(crate) fn parse_templates(o: &mut Obj) -> Result<Option<Templates>, ScenarioError> {
    let Some(value) = o.take("templates") else { return Ok(None) };
    let mut t = Obj::new(value, o.at("templates"))?;
    let mut read = |key: &str| -> Result<Option<colloquy::templates::Template>, ScenarioError> {
        Ok(t.string(key)?.map(colloquy::templates::Template::from))
    };
    let templates = Templates {
        update: read("update")?,
        duplicate_reject: read("duplicate_reject")?,
        duplicate_confirm: read("duplicate_confirm")?,
        approval_waiting: read("approval_waiting")?,
        approval_rejected: read("approval_rejected")?,
        queued: read("queued")?,
        reply_at_tail: read("reply_at_tail")?,
        reply_maybe_covered: read("reply_maybe_covered")?,
    };
    t.finish()?;
    Ok(Some(templates))
}
