//! Session-wide options.

use std::time::Duration;

use colloquy_llm::context::ContextWindow;
use colloquy_model::Templates;

/// Session-wide options.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Tool-reply steps that may still call tools (default 3, §4.1).
    pub max_tool_steps: u32,
    /// Whether speeches may be interrupted unless the agent says otherwise (default true).
    pub allow_interruptions: bool,
    /// How long both sides must be quiet before the user counts as away (default 15 s;
    /// `None` disables the timer).
    pub user_away_timeout: Option<Duration>,
    /// Session-level templates (§8); agents may replace them.
    pub templates: Option<Templates>,
    /// How long a cooperative call may clean up after a cancel (default 2 s, decision 20).
    pub cancel_grace: Duration,
    /// How long a handoff or a close may take, counted from when it is asked, before the calls
    /// it still waits for are aborted (they end `error` "drain timeout") and their toolsets
    /// start no new call; blocking calls included. Default 30 s: a tool that is not
    /// cancellable (a payment, a booking) gets that long to finish, and no tool can hold a
    /// close for ever. `None` waits as long as such calls run, as LiveKit Agents does; only a
    /// host that asks for it gets that (docs/decisions.md#edges-tool-deadlines).
    pub drain_timeout: Option<Duration>,
    /// How many tool calls one user turn may make, the deferred replies it leads to included
    /// (default 20). Past it, calls are answered with an error the model reads instead of
    /// running, requests go out with `tool_choice` none, and an `x_tool_budget_exhausted` event
    /// tells the host; the next user turn starts afresh. A model that re-calls a tool after
    /// every deferred reply can then never loop for ever.
    pub max_tool_calls_per_turn: u32,
    /// The deadline of a call whose tool and toolsets set none (default `None`: a tool runs
    /// until it ends, is cancelled, or its drain runs out). See [`colloquy_model::CallLimits`].
    pub tool_deadline: Option<Duration>,
    /// The heartbeat of a call whose tool and toolsets set none (default `None`).
    pub tool_heartbeat: Option<Duration>,
    /// What a resumed session does with a call that was running when its process ended, for
    /// tools whose toolsets and themselves decide nothing (default `Fail`: the model reads that
    /// it may or may not have completed; docs/durability.md#on-interrupted).
    pub on_interrupted: colloquy_model::OnInterrupted,
    /// How many events a lossless subscriber (`subscribe`) may leave unread: past it the
    /// stream gets a last `x_stream_overflowed` item and ends, with a warning in the log,
    /// rather than growing without bound; the session and other subscribers go on. Default
    /// 100,000 (a few hundred turns).
    pub max_unread_events: usize,
    /// How long an LLM request may go without sending anything (its first chunk included)
    /// before it fails: the turn ends with an `llm` error event (default 30 s; `None` waits
    /// for ever).
    pub llm_timeout: Option<Duration>,
    /// The speech-sink watchdog: how long a playout may go without reporting (neither done
    /// nor progress) before colloquy asks it to stop and, if it still says nothing, ends the
    /// speech itself with a `sink` error event (default 60 s; `None` trusts the sink).
    pub playout_timeout: Option<Duration>,
    /// How long a call of a tool that requires approval waits for `approve` or `reject`
    /// before it is rejected (``no answer within N s``). Default 5 minutes: long enough for
    /// a person to read the request and answer on a call, short enough that a forgotten
    /// request does not hold its duplicate key and a handoff's drain for ever. `None` waits
    /// until the host answers, the call is cancelled, or the session closes.
    pub approval_timeout: Option<Duration>,
    /// How long an interrupted speech still waits for its blocking calls before it lets them
    /// go on in the background (default 5 s, LiveKit's bound on an interrupted speech). Each
    /// is then answered `The tool call is still in progress.`, asking for no reply, and its
    /// result comes later as its `_final` pair; so `interrupt()`, and a user turn that
    /// interrupts, never wait for a slow tool longer than this. `None` waits for the calls
    /// (docs/decisions.md#interrupt-bound).
    pub interrupt_timeout: Option<Duration>,
    /// The model's context size and the policy that keeps each request within it
    /// (docs/providers.md#a-context-that-fits). By default no size: requests go as they are,
    /// and one a provider refuses as too long is retried once with its oldest items left out.
    pub context: ContextWindow,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            max_tool_steps: 3,
            allow_interruptions: true,
            user_away_timeout: Some(Duration::from_secs(15)),
            templates: None,
            cancel_grace: Duration::from_secs(2),
            drain_timeout: Some(Duration::from_secs(30)),
            max_tool_calls_per_turn: 20,
            tool_deadline: None,
            tool_heartbeat: None,
            on_interrupted: colloquy_model::OnInterrupted::Fail,
            max_unread_events: 100_000,
            llm_timeout: Some(Duration::from_secs(30)),
            playout_timeout: Some(Duration::from_secs(60)),
            approval_timeout: Some(Duration::from_secs(300)),
            interrupt_timeout: Some(Duration::from_secs(5)),
            context: ContextWindow::default(),
        }
    }
}

impl SessionOptions {
    /// The limits of a call whose tool and toolsets set none.
    pub(crate) fn call_limits(&self) -> colloquy_model::CallLimits {
        let mut limits = colloquy_model::CallLimits::default();
        limits.deadline = self.tool_deadline;
        limits.heartbeat = self.tool_heartbeat;
        limits.on_interrupted = Some(self.on_interrupted);
        limits
    }
}
