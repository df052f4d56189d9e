//! The host's commands sent with an id (`SessionHandle::with_command_id`,
//! docs/durability.md#commands): the ids the session took, so a resend runs no more, and the
//! ones whose effect is still to come.
//!
//! A command is taken once it did something: a user turn's message committed, a speech
//! created, an input queued, work queued for a handoff's new agent, a call to cancel or answer
//! found. Its id is journaled in the batch that holds the first of what it did that a resume
//! keeps (its `command_taken` follows that record): a user turn's message at once; a speech's
//! first committed item, or its end; an input's message; a call's let-through or end; work
//! queued during a handoff, once replayed, as the same. What a crash takes back before then,
//! the command did not do, and a resend after the resume runs it.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use colloquy_store::COMMANDS_KEPT;

use super::fact::Fact;

/// What a taken command's journal record waits for.
#[derive(Debug)]
enum Awaited {
    /// The first item committed by this speech, or its end.
    Speech(String),
    /// This call's let-through, or its end.
    Call(String),
}

#[derive(Default)]
pub(crate) struct Commands {
    /// The ids taken, the newest [`COMMANDS_KEPT`]; `order` keeps them oldest first.
    taken: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
    /// The command being run, until it did something.
    current: Option<Arc<str>>,
    /// Taken commands whose record waits for their effect to be journaled.
    awaiting: Vec<(Awaited, Arc<str>)>,
    /// During a handoff, the command of each piece of work queued for the new agent, in order.
    queued: Vec<Option<Arc<str>>>,
    /// Those of a handoff that ended, as its work is replayed.
    replaying: VecDeque<Option<Arc<str>>>,
}

impl Commands {
    /// The commands a resumed session had taken (its journal's, oldest first).
    pub(crate) fn resumed(ids: Vec<String>) -> Self {
        let mut commands = Self::default();
        for id in ids {
            commands.take(Arc::from(id));
        }
        commands
    }

    /// Whether command `id` was taken.
    pub(crate) fn is_taken(&self, id: &str) -> bool {
        self.taken.contains(id)
    }

    /// Command `id` runs now; `call`: the call it cancels or answers, if the session runs it
    /// (its Toolset does the rest, out of the Session's sight).
    pub(crate) fn begin(&mut self, id: Arc<str>, call: Option<&str>) {
        match call {
            Some(call_id) => {
                self.awaiting.push((Awaited::Call(call_id.to_owned()), Arc::clone(&id)));
                self.take(id);
            }
            None => self.current = Some(id),
        }
    }

    /// The command that ran is over: one that did nothing (refused) is not taken.
    pub(crate) fn end(&mut self) {
        self.current = None;
    }

    /// The next piece of work a handoff queued is replayed now: its command runs again.
    pub(crate) fn replay_next(&mut self) {
        self.current = self.replaying.pop_front().flatten();
    }

    /// What `fact` says of the commands: the ids whose `command_taken` is due now, after the
    /// fact's own record.
    pub(crate) fn apply(&mut self, fact: Fact<'_>) -> Vec<Arc<str>> {
        let mut due = Vec::new();
        match fact {
            Fact::WorkQueued(_) => {
                let id = self.current.take();
                if let Some(id) = &id {
                    self.take(Arc::clone(id));
                }
                self.queued.push(id);
                return due;
            }
            Fact::HandoffEnded => self.replaying = std::mem::take(&mut self.queued).into(),
            _ => {}
        }
        if let Some(id) = self.current.take() {
            match fact {
                // Kept by a resume as it is: the command's record goes with it.
                Fact::Committed { .. } => {
                    self.take(Arc::clone(&id));
                    due.push(id);
                }
                Fact::SpeechCreated { speech_id, .. } | Fact::InputQueued { speech_id, .. } => {
                    self.awaiting.push((Awaited::Speech(speech_id.to_owned()), Arc::clone(&id)));
                    self.take(id);
                }
                _ => self.current = Some(id),
            }
        }
        if self.awaiting.is_empty() {
            return due;
        }
        let (speech, call) = match fact {
            Fact::Committed { speech_id: Some(speech_id), .. }
            | Fact::InputTaken { speech_id }
            | Fact::SpeechDone { speech_id, .. } => (Some(speech_id), None),
            Fact::CallLetThrough { call_id } | Fact::CallEnded { call_id } => (None, Some(call_id)),
            _ => return due,
        };
        self.awaiting.retain(|(awaited, id)| {
            let done = match awaited {
                Awaited::Speech(s) => speech == Some(s.as_str()),
                Awaited::Call(c) => call == Some(c.as_str()),
            };
            if done {
                due.push(Arc::clone(id));
            }
            !done
        });
        due
    }

    fn take(&mut self, id: Arc<str>) {
        if !self.taken.insert(Arc::clone(&id)) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > COMMANDS_KEPT
            && let Some(oldest) = self.order.pop_front()
        {
            self.taken.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speech_command_is_taken_at_once_and_due_with_its_first_commit() {
        let mut commands = Commands::default();
        commands.begin(Arc::from("c1"), None);
        let source = colloquy_model::SpeechSource::Say;
        assert!(commands.apply(Fact::TurnBegan).is_empty());
        assert!(commands.apply(Fact::SpeechCreated { speech_id: "s1", source }).is_empty());
        commands.end();
        assert!(commands.is_taken("c1"));
        let done = Fact::SpeechDone { speech_id: "s2", interrupted: false };
        assert!(commands.apply(done).is_empty(), "another speech");
        let items = [];
        let commit = Fact::Committed { agent: "a", speech_id: Some("s1"), items: &items };
        assert_eq!(commands.apply(commit), [Arc::from("c1")]);
        let done = Fact::SpeechDone { speech_id: "s1", interrupted: false };
        assert!(commands.apply(done).is_empty(), "due once");
    }

    #[test]
    fn a_refused_command_is_not_taken_and_the_oldest_ids_are_forgotten() {
        let mut commands = Commands::default();
        commands.begin(Arc::from("refused"), None);
        commands.end();
        assert!(!commands.is_taken("refused"));
        let ids: Vec<String> = (0..=COMMANDS_KEPT).map(|n| format!("c{n}")).collect();
        let commands = Commands::resumed(ids);
        assert!(!commands.is_taken("c0"));
        assert!(commands.is_taken("c1") && commands.is_taken(&format!("c{COMMANDS_KEPT}")));
    }
}
