//! Where speech goes: the [`SpeechSink`] a host provides (terminal, TTS, websocket).
//!
//! For each piece of agent speech the runtime hands the sink a [`Playout`]: the sink reads
//! text deltas from it, plays them at its own pace, and reports back either
//! [`Playout::done`] or [`Playout::interrupted`] with the text actually played, which becomes
//! the assistant message. Without a sink, speech plays out at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Receives the agent's speech.
///
/// ```
/// use colloquy_actors::{Playout, SpeechSink};
/// /// Prints speech to stdout as it arrives.
/// struct Terminal;
/// impl SpeechSink for Terminal {
///     fn play(&self, mut playout: Playout) {
///         tokio::spawn(async move {
///             while let Some(delta) = playout.next_text().await {
///                 print!("{delta}");
///             }
///             println!();
///             playout.done();
///         });
///     }
/// }
/// ```
pub trait SpeechSink: Send + Sync + 'static {
    /// Starts playing one piece of speech (one reply step). Must not block: hand the playout
    /// to a task.
    fn play(&self, playout: Playout);
}

/// A sink that "plays" text at a fixed pace of virtual or real time per character and plays
/// it nowhere: for tests, scenario files (`playout_ms_per_char`) and load tests that need
/// speech to take time. An interruption keeps the characters played so far.
///
/// ```
/// use colloquy_actors::PacedSink;
/// let sink = PacedSink::new(std::time::Duration::from_millis(10)); // 100 characters a second
/// ```
#[derive(Clone, Copy, Debug)]
pub struct PacedSink {
    per_char: std::time::Duration,
}

impl PacedSink {
    /// A sink taking `per_char` for every character.
    pub fn new(per_char: std::time::Duration) -> Self {
        Self { per_char }
    }
}

impl SpeechSink for PacedSink {
    fn play(&self, mut playout: Playout) {
        let per_char = self.per_char;
        tokio::spawn(async move {
            let stop = playout.interrupt_signal();
            let mut played = String::new();
            let mut count = 0;
            'playing: loop {
                let delta = tokio::select! {
                    biased;
                    () = stop.requested() => break 'playing,
                    delta = playout.next_text() => delta,
                };
                let Some(delta) = delta else { break };
                for c in delta.chars() {
                    tokio::select! {
                        biased;
                        () = stop.requested() => break 'playing,
                        () = tokio::time::sleep(per_char) => played.push(c),
                    }
                    count += 1;
                    playout.progress(count);
                }
            }
            if stop.is_requested() {
                playout.interrupted(played);
            } else {
                playout.done();
            }
        });
    }
}

/// Fires when the runtime interrupts a playout (see [`Playout::interrupt_signal`]).
#[derive(Clone, Debug)]
pub struct InterruptSignal(CancellationToken);

impl InterruptSignal {
    /// Resolves once the playout is interrupted.
    pub async fn requested(&self) {
        self.0.cancelled().await;
    }

    /// True once the playout is interrupted.
    pub fn is_requested(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// How a playout ended, as the sink reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlayoutReport {
    /// Everything was played.
    Done,
    /// Playback stopped early; `played_text` is what the user heard.
    Interrupted {
        /// The text actually played.
        played_text: String,
    },
}

/// One piece of speech for a sink to play.
#[derive(Debug)]
pub struct Playout {
    speech_id: String,
    text: mpsc::UnboundedReceiver<String>,
    interrupt: CancellationToken,
    report: Option<oneshot::Sender<PlayoutReport>>,
    progress: Arc<AtomicUsize>,
}

impl Playout {
    /// The speech this belongs to (`s1`, `s2`, …).
    pub fn speech_id(&self) -> &str {
        &self.speech_id
    }

    /// The next text delta; `None` once all text has been delivered.
    pub async fn next_text(&mut self) -> Option<String> {
        self.text.recv().await
    }

    /// A signal that fires when the runtime asks the sink to stop playing. It is a separate
    /// value so a sink can wait on it and on [`Playout::next_text`] in one `select!`.
    pub fn interrupt_signal(&self) -> InterruptSignal {
        InterruptSignal(self.interrupt.clone())
    }

    /// Reports how many characters have been played so far (used if the sink goes away
    /// without a final report after an interruption).
    pub fn progress(&self, played_chars: usize) {
        self.progress.store(played_chars, Ordering::Relaxed);
    }

    /// Reports that everything was played.
    pub fn done(mut self) {
        if let Some(tx) = self.report.take() {
            let _ = tx.send(PlayoutReport::Done);
        }
    }

    /// Reports that playback stopped after `played_text`.
    pub fn interrupted(mut self, played_text: impl Into<String>) {
        if let Some(tx) = self.report.take() {
            let _ = tx.send(PlayoutReport::Interrupted { played_text: played_text.into() });
        }
    }
}

/// How a playout ended, from the runtime's side.
#[derive(Debug)]
pub(crate) struct PlayoutEnd {
    /// The text played (the whole text unless interrupted).
    pub text: String,
    pub interrupted: bool,
    /// Set when the sink misbehaved (dropped the playout without a report).
    pub sink_error: Option<String>,
}

/// The runtime's end of a playout.
pub(crate) enum PlayoutDriver {
    /// No sink: text counts as played the moment it arrives.
    Immediate { text: String },
    Sink {
        tx: Option<mpsc::UnboundedSender<String>>,
        pushed: String,
        interrupt: CancellationToken,
        report: oneshot::Receiver<PlayoutReport>,
        progress: Arc<AtomicUsize>,
        /// The watchdog: the longest the sink may go without a report or progress.
        watchdog: Option<Duration>,
    },
}

/// What waiting for the sink's report gave.
enum Waited {
    Report(Option<PlayoutReport>),
    /// The caller's stop signal fired first.
    Stopped,
    /// Neither a report nor progress for the watchdog's time.
    Stalled,
}

/// Waits for the report; with a watchdog, gives up once progress has not moved for its time.
async fn wait_report(
    report: &mut oneshot::Receiver<PlayoutReport>,
    progress: &AtomicUsize,
    watchdog: Option<Duration>,
    stop: Option<&CancellationToken>,
) -> Waited {
    let stopped = async {
        match stop {
            Some(stop) => stop.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stopped);
    let mut seen = progress.load(Ordering::Relaxed);
    loop {
        let stall = async {
            match watchdog {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            r = &mut *report => return Waited::Report(r.ok()),
            () = &mut stopped => return Waited::Stopped,
            () = stall => {
                let now = progress.load(Ordering::Relaxed);
                if now == seen {
                    return Waited::Stalled;
                }
                seen = now;
            }
        }
    }
}

impl PlayoutDriver {
    pub(crate) fn open(
        sink: Option<&Arc<dyn SpeechSink>>,
        speech_id: &str,
        watchdog: Option<Duration>,
    ) -> Self {
        let Some(sink) = sink else {
            return Self::Immediate { text: String::new() };
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let (report_tx, report_rx) = oneshot::channel();
        let interrupt = CancellationToken::new();
        let progress = Arc::new(AtomicUsize::new(0));
        sink.play(Playout {
            speech_id: speech_id.to_string(),
            text: rx,
            interrupt: interrupt.clone(),
            report: Some(report_tx),
            progress: Arc::clone(&progress),
        });
        Self::Sink {
            tx: Some(tx),
            pushed: String::new(),
            interrupt,
            report: report_rx,
            progress,
            watchdog,
        }
    }

    pub(crate) fn push(&mut self, delta: &str) {
        match self {
            Self::Immediate { text } => text.push_str(delta),
            Self::Sink { tx, pushed, .. } => {
                pushed.push_str(delta);
                if let Some(tx) = tx {
                    let _ = tx.send(delta.to_string());
                }
            }
        }
    }

    /// Ends the text and waits for the playout to finish, or to be interrupted when `stop`
    /// fires first. A sink that stalls past the watchdog is asked to stop.
    pub(crate) async fn finish(self, stop: &CancellationToken) -> PlayoutEnd {
        match self {
            Self::Immediate { text } => PlayoutEnd { text, interrupted: false, sink_error: None },
            Self::Sink { tx, pushed, interrupt, mut report, progress, watchdog } => {
                drop(tx);
                let result = match wait_report(&mut report, &progress, watchdog, Some(stop)).await {
                    Waited::Report(r) => Ok(r),
                    Waited::Stopped | Waited::Stalled => {
                        interrupt.cancel();
                        match wait_report(&mut report, &progress, watchdog, None).await {
                            Waited::Report(r) => Ok(r),
                            _ => Err(watchdog),
                        }
                    }
                };
                Self::settle(result, pushed, &progress)
            }
        }
    }

    /// Asks the sink to stop and waits for its report (at most the watchdog's time).
    pub(crate) async fn interrupt(self) -> PlayoutEnd {
        match self {
            Self::Immediate { text } => PlayoutEnd { text, interrupted: true, sink_error: None },
            Self::Sink { tx, pushed, interrupt, mut report, progress, watchdog } => {
                // The signal first: a sink that sees its text end must already see why.
                interrupt.cancel();
                drop(tx);
                let result = match wait_report(&mut report, &progress, watchdog, None).await {
                    Waited::Report(r) => Ok(r),
                    _ => Err(watchdog),
                };
                let mut end = Self::settle(result, pushed, &progress);
                end.interrupted = true;
                end
            }
        }
    }

    /// `Ok(None)`: the sink dropped the playout unreported; `Err`: the watchdog gave up.
    fn settle(
        result: Result<Option<PlayoutReport>, Option<Duration>>,
        pushed: String,
        progress: &AtomicUsize,
    ) -> PlayoutEnd {
        let problem = match result {
            Ok(Some(PlayoutReport::Done)) => {
                return PlayoutEnd { text: pushed, interrupted: false, sink_error: None };
            }
            Ok(Some(PlayoutReport::Interrupted { played_text })) => {
                return PlayoutEnd { text: played_text, interrupted: true, sink_error: None };
            }
            Ok(None) => "the speech sink dropped a playout without reporting".to_string(),
            Err(limit) => format!(
                "the speech sink reported nothing for {} ms: playout ended by the watchdog",
                limit.unwrap_or_default().as_millis()
            ),
        };
        // The progress the sink reported, if any, says how far it got.
        let played = progress.load(Ordering::Relaxed);
        let text: String = if played > 0 { pushed.chars().take(played).collect() } else { pushed };
        PlayoutEnd { text, interrupted: played > 0, sink_error: Some(problem) }
    }
}
