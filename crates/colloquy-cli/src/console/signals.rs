//! SIGINT, SIGTERM and SIGHUP as one stream, for every command that runs until told to stop.

/// The signals the chat (and a node) answers.
pub(crate) enum Signal {
    Interrupt,
    Terminate,
    Hangup,
}

/// SIGINT, SIGTERM and SIGHUP, as a stream. Once listened for, a signal no longer ends the
/// process by itself: the chat closes its session first.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            biased;
            Some(()) = self.terminate.recv() => Signal::Terminate,
            Some(()) = self.hangup.recv() => Signal::Hangup,
            Some(()) = self.interrupt.recv() => Signal::Interrupt,
            else => std::future::pending().await,
        }
    }
}
