//! Who may speak: the speeches the Session created and that are not done, the ones that lent
//! the floor to wait for their blocking tools, and floor holds (a tool's `foreground`,
//! §10.1, decision 8).
//!
//! Invariants: speeches are numbered `s1`, `s2`, … in creation order; at most one hold is in
//! force, and holds are granted in the order they were asked for; a speech waiting for its
//! blocking tools does not count as speaking.

use std::collections::{BTreeSet, VecDeque};

use ractor::RpcReplyPort;

use crate::api::error::SessionError;

/// A `hold_floor` caller, answered with its hold's id once granted.
struct HoldWaiter {
    hold: u64,
    reply: RpcReplyPort<Result<u64, SessionError>>,
}

#[derive(Default)]
pub(crate) struct Floor {
    speech_seq: u64,
    /// Speeches created and not yet done (queued, playing, or waiting on blocking tools).
    pending: usize,
    /// Speeches that released the floor to wait for their blocking tools.
    waiting: BTreeSet<String>,
    /// The hold in force.
    held: Option<u64>,
    hold_waiters: VecDeque<HoldWaiter>,
    hold_seq: u64,
}

impl Floor {
    /// The id the next speech will get.
    pub fn upcoming_speech_id(&self) -> String {
        format!("s{}", self.speech_seq + 1)
    }

    /// Counts a new speech; returns its id.
    pub fn speech_created(&mut self) -> String {
        self.speech_seq += 1;
        self.pending += 1;
        format!("s{}", self.speech_seq)
    }

    /// A speech is done.
    pub fn speech_ended(&mut self, speech_id: &str) {
        self.pending = self.pending.saturating_sub(1);
        self.waiting.remove(speech_id);
    }

    /// The Activity is gone and its speeches with it.
    pub fn speeches_lost(&mut self) {
        self.pending = 0;
        self.waiting.clear();
    }

    /// A speech lent the floor to wait for its blocking tools (`waiting`), or took it back.
    pub fn set_waiting(&mut self, speech_id: String, waiting: bool) {
        if waiting {
            self.waiting.insert(speech_id);
        } else {
            self.waiting.remove(&speech_id);
        }
    }

    /// No speech is pending at all.
    pub fn no_speech(&self) -> bool {
        self.pending == 0
    }

    /// Some speech waits for its blocking tools.
    pub fn tools_running(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Some speech holds the floor (it is queued or playing, not waiting for tools).
    pub fn speaking(&self) -> bool {
        self.pending > self.waiting.len()
    }

    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// Queues a hold request; it is granted by [`grant_next`](Self::grant_next).
    pub fn queue_hold(&mut self, reply: RpcReplyPort<Result<u64, SessionError>>) {
        self.hold_seq += 1;
        self.hold_waiters.push_back(HoldWaiter { hold: self.hold_seq, reply });
    }

    /// Grants waiting holds in order while none is in force; returns the one granted.
    pub fn grant_next(&mut self) -> Option<u64> {
        while self.held.is_none() {
            let HoldWaiter { hold, reply } = self.hold_waiters.pop_front()?;
            if reply.send(Ok(hold)).is_ok() {
                self.held = Some(hold);
                return Some(hold);
            }
        }
        None
    }

    /// Ends `hold`, if it is the one in force.
    pub fn release(&mut self, hold: u64) {
        if self.held == Some(hold) {
            self.held = None;
        }
    }

    /// Refuses every waiting hold (the session is closing).
    pub fn refuse_holds(&mut self) {
        for waiter in self.hold_waiters.drain(..) {
            let _ = waiter.reply.send(Err(SessionError::Closed));
        }
    }
}
