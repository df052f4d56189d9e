//! Chat items for this crate's unit tests, stamped at zero.

use colloquy_model::{ChatItem, FunctionCall, FunctionCallOutput, Message, Role, Timestamp};

/// A message under item id `id` (a step's message: the step's id).
pub(crate) fn msg(id: &str, role: Role, text: &str) -> ChatItem {
    ChatItem::Message(Message {
        id: id.into(),
        role,
        text: text.into(),
        interrupted: false,
        created_at: Timestamp::new(0, 0),
    })
}

/// A call `call_id` of `book(city: Paris)` under item id `id` (`<step>/fnc_<n>` for a step's).
pub(crate) fn call(id: &str, call_id: &str) -> ChatItem {
    ChatItem::FunctionCall(FunctionCall {
        id: id.into(),
        call_id: call_id.into(),
        name: "book".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
        extra: Default::default(),
        created_at: Timestamp::new(0, 0),
    })
}

/// The output `text` of call `call_id`, under item id `out_<call_id>`.
pub(crate) fn output(call_id: &str, text: &str) -> ChatItem {
    ChatItem::FunctionCallOutput(FunctionCallOutput {
        id: format!("out_{call_id}"),
        call_id: call_id.into(),
        name: "book".into(),
        output: text.into(),
        is_error: false,
        reply_required: true,
        created_at: Timestamp::new(0, 0),
    })
}
