//! Running a request against the session it is for, on the side that holds the session.

use colloquy_actors::{SessionError, SessionHandle};
use colloquy_protocol::{Command, ErrorKind, PROTOCOL_VERSION, ProtocolError, Reply, Request};

use crate::{from_proto, to_proto};

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
            let choice = from_proto::tool_choice(choice);
            ok(session.generate_reply_with(instructions, choice).await)?
        }
        Command::Say { text } => ok(session.say(text).await)?,
        Command::Interrupt => ok(session.interrupt().await)?,
        Command::SetUserSpeaking { speaking } => ok(session.set_user_speaking(speaking))?,
        Command::CancelToolCall { call_id } => {
            let done = session.cancel_tool_call(call_id).await;
            done.map(|()| Reply::Ok).map_err(to_proto::cancel_error)?
        }
        Command::Approve { call_id } => {
            let done = session.approve(call_id).await;
            done.map(|()| Reply::Ok).map_err(to_proto::approval_error)?
        }
        Command::Reject { call_id, reason } => {
            let done = session.reject(call_id, reason).await;
            done.map(|()| Reply::Ok).map_err(to_proto::approval_error)?
        }
        Command::RunningToolCalls => {
            let calls = session.running_tool_calls().await.map_err(to_proto::session_error)?;
            Reply::Calls { calls: calls.into_iter().map(to_proto::running_call).collect() }
        }
        Command::History => {
            Reply::History { items: session.history().await.map_err(to_proto::session_error)? }
        }
        Command::Inspect => {
            let snapshot = session.inspect().await.map_err(to_proto::session_error)?;
            Reply::Snapshot { snapshot: Box::new(to_proto::snapshot(snapshot)) }
        }
        Command::States => {
            let (agent, user) = session.states().await.map_err(to_proto::session_error)?;
            Reply::States { agent, user }
        }
        Command::WaitForIdle => ok(session.wait_for_idle().await)?,
        Command::WaitForQuiet => ok(session.wait_for_quiet().await)?,
        Command::Close { reason } => {
            let closed =
                session.close_with_reason(reason).await.map_err(to_proto::session_error)?;
            let history = closed.history.items().iter().map(|item| (**item).clone()).collect();
            Reply::Closed { history }
        }
        // `Command` is non-exhaustive: a command the protocol adds before this edge runs it.
        other => {
            let message = format!("`{}` is not supported by this side", other.name());
            return Err(ProtocolError::new(ErrorKind::BadRequest, message));
        }
    })
}

fn ok(result: Result<(), SessionError>) -> Result<Reply, ProtocolError> {
    result.map(|()| Reply::Ok).map_err(to_proto::session_error)
}
