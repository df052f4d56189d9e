//! The synthetic `function_call` / `function_call_output` pairs a background call's later
//! updates and its final result become (`<id>_update_<n>`, `<id>_final`).

use colloquy_model::{ChatItem, FunctionCall, FunctionCallOutput};

use crate::support::clock::SessionClock;

/// A synthetic pair.
pub(crate) struct Pair {
    pub call: FunctionCall,
    pub output: FunctionCallOutput,
}

impl Pair {
    /// A synthetic function_call / function_call_output pair (§7 step 3) copying the original
    /// call's name, arguments and extra, stamped now.
    pub(crate) fn new(
        clock: &SessionClock,
        original: &FunctionCall,
        id: &str,
        output: String,
        is_error: bool,
        reply: bool,
    ) -> Pair {
        let call = FunctionCall {
            id: clock.item_id(),
            call_id: id.to_string(),
            name: original.name.clone(),
            arguments: original.arguments.clone(),
            extra: original.extra.clone(),
            created_at: clock.now(),
        };
        let output = FunctionCallOutput {
            id: clock.item_id(),
            call_id: id.to_string(),
            name: original.name.clone(),
            output,
            is_error,
            reply_required: reply,
            created_at: clock.now(),
        };
        Pair { call, output }
    }

    /// The pair as two items, call first.
    pub(crate) fn items(self) -> [ChatItem; 2] {
        [ChatItem::FunctionCall(self.call), ChatItem::FunctionCallOutput(self.output)]
    }
}
