//! Running a request against the session it is for, on the side that holds the session.

use colloquy_actors::SessionHandle;

use crate::PROTOCOL_VERSION;
use crate::command::{Command, Request};
use crate::reply::{ErrorKind, ProtocolError, Reply};

/// Runs `request` on `session` and answers it; never panics on bad input (a request of another
/// version is answered [`ErrorKind::UnsupportedVersion`]).
pub async fn execute(session: &SessionHandle, request: Request) -> Reply {
    if request.v != PROTOCOL_VERSION {
        let message = format!(
            "protocol version {} is not supported (this side speaks {PROTOCOL_VERSION})",
            request.v
        );
        return Reply::Error(ProtocolError::new(ErrorKind::UnsupportedVersion, message));
    }
    match run(session, request.command).await {
        Ok(reply) => reply,
        Err(e) => Reply::Error(e),
    }
}

async fn run(session: &SessionHandle, command: Command) -> Result<Reply, ProtocolError> {
    Ok(match command {
        Command::UserTurn { text } => ok(session.user_turn(text).await)?,
        Command::UserInput { text } => ok(session.user_input(text).await)?,
        Command::GenerateReply { instructions, tool_choice: None } => {
            ok(session.generate_reply(instructions).await)?
        }
        Command::GenerateReply { instructions, tool_choice: Some(choice) } => {
            ok(session.generate_reply_with(instructions, choice).await)?
        }
        Command::Say { text } => ok(session.say(text).await)?,
        Command::Interrupt => ok(session.interrupt().await)?,
        Command::SetUserSpeaking { speaking } => ok(session.set_user_speaking(speaking))?,
        Command::CancelToolCall { call_id } => ok(session.cancel_tool_call(call_id).await)?,
        Command::Approve { call_id } => ok(session.approve(call_id).await)?,
        Command::Reject { call_id, reason } => ok(session.reject(call_id, reason).await)?,
        Command::RunningToolCalls => Reply::Calls { calls: session.running_tool_calls().await? },
        Command::History => Reply::History { items: session.history().await? },
        Command::Inspect => Reply::Snapshot { snapshot: Box::new(session.inspect().await?) },
        Command::States => {
            let (agent, user) = session.states().await?;
            Reply::States { agent, user }
        }
        Command::WaitForIdle => ok(session.wait_for_idle().await)?,
        Command::WaitForQuiet => ok(session.wait_for_quiet().await)?,
        Command::Close { reason } => {
            let closed = session.close_with_reason(reason).await?;
            let history = closed.history.items().iter().map(|item| (**item).clone()).collect();
            Reply::Closed { history }
        }
    })
}

fn ok<E: Into<ProtocolError>>(result: Result<(), E>) -> Result<Reply, ProtocolError> {
    result.map(|()| Reply::Ok).map_err(Into::into)
}
