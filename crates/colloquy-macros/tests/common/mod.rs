//! What the macro tests share.

use colloquy::session::SessionHandle;

/// The outputs of the function calls in the session's history, in order.
pub(crate) async fn outputs(session: &SessionHandle) -> Vec<String> {
    let history = session.history().await.expect("the session answers");
    history.iter().filter_map(|i| i.as_function_call_output()).map(|o| o.output.clone()).collect()
}
