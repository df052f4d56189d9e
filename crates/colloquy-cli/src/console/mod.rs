//! The terminal every command writes to and the signals it stops on: lines with a style,
//! text made safe to show (`clean`), the chat's live lines (`terminal`), and SIGINT, SIGTERM
//! and SIGHUP as one stream (`signals`). The bottom of the CLI: it imports no other folder.

pub mod clean;
pub mod event_lines;
mod signals;
pub mod table;
pub mod terminal;

pub(crate) use signals::{Signal, Signals};
